#include "tandem/trainers/lr_schedule.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "tandem/core/error.h"

namespace tandem::trainers {
namespace {

constexpr const char* kGrammar = "none, step:S:GAMMA, cosine, warmup:N or warmup:N+step:S:GAMMA / warmup:N+cosine";

using Make = std::function<std::unique_ptr<optim::LRScheduler>(optim::Optimizer&)>;

struct Parser {
  std::string_view whole;

  [[noreturn]] void fail(const std::string& why) const {
    TANDEM_FAIL("parse_lr_schedule: \"", excerpt(whole), "\" ", why, "; expected ", kGrammar);
  }
  int64_t count(std::string_view text, const char* what, int64_t min, int64_t max) const {
    int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < min || value > max) {
      fail(std::string("has ") + what + " \"" + excerpt(text) + "\" but expected an integer in [" +
           std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    return value;
  }
  double factor(std::string_view text, const char* what) const {
    const std::string copy(text);
    char* end = nullptr;
    const double value = copy.empty() ? NAN : std::strtod(copy.c_str(), &end);
    if (copy.empty() || end != copy.c_str() + copy.size() || !(value > 0.0 && value <= 1.0)) {
      fail(std::string("has ") + what + " \"" + excerpt(text) + "\" but expected a number in (0, 1]");
    }
    return value;
  }

  // A decay over `epochs` epochs: step:S:GAMMA or cosine. `name` receives its canonical text.
  Make decay(std::string_view text, int64_t epochs, std::string& name) const {
    if (text == "cosine") {
      name = "cosine (t_max " + std::to_string(epochs) + ")";
      return [epochs](optim::Optimizer& optimizer) {
        return std::make_unique<optim::CosineAnnealingLR>(optimizer, epochs);
      };
    }
    if (text.starts_with("step:")) {
      const std::string_view rest = text.substr(5);
      const size_t colon = rest.find(':');
      if (colon == std::string_view::npos) fail("has no GAMMA after step:S");
      const int64_t step_size = count(rest.substr(0, colon), "step size", 1, int64_t{1} << 40);
      const double gamma = factor(rest.substr(colon + 1), "gamma");
      name = "step:" + std::to_string(step_size) + ":" + std::string(rest.substr(colon + 1));
      return [step_size, gamma](optim::Optimizer& optimizer) {
        return std::make_unique<optim::StepLR>(optimizer, step_size, gamma);
      };
    }
    fail("is not a schedule");
  }
};

}  // namespace

std::optional<LrSchedule> parse_lr_schedule(std::string_view text, int64_t epochs) {
  TANDEM_CHECK(epochs >= 1, "parse_lr_schedule: epochs is ", epochs, " but expected at least 1");
  const Parser parser{text};
  if (text == "none") return std::nullopt;
  if (!text.starts_with("warmup:")) {
    LrSchedule schedule;
    schedule.make = parser.decay(text, epochs, schedule.name);
    return schedule;
  }
  const std::string_view rest = text.substr(7);
  const size_t plus = rest.find('+');
  const bool then_decay = plus != std::string_view::npos;
  if (then_decay && epochs < 2) parser.fail("needs at least 2 epochs (a warm-up, then a decay), but epochs is 1");
  const int64_t warmup = parser.count(rest.substr(0, plus), "warm-up epochs", 1, then_decay ? epochs - 1 : epochs);
  // lr * (start + (1 - start) * min(e, N) / N) with start = 1 / (N + 1) is lr * (e + 1) / (N + 1) for e < N.
  const double start = 1.0 / static_cast<double>(warmup + 1);
  const Make ramp = [warmup, start](optim::Optimizer& optimizer) {
    return std::make_unique<optim::LinearLR>(optimizer, start, 1.0, warmup);
  };
  LrSchedule schedule{"warmup:" + std::to_string(warmup), ramp};
  if (!then_decay) return schedule;
  std::string decay_name;
  const Make decay = parser.decay(rest.substr(plus + 1), epochs - warmup, decay_name);
  schedule.name += "+" + decay_name;
  schedule.make = [ramp, decay, warmup](optim::Optimizer& optimizer) -> std::unique_ptr<optim::LRScheduler> {
    const std::unique_ptr<optim::LRScheduler> first = ramp(optimizer);
    const std::unique_ptr<optim::LRScheduler> second = decay(optimizer);
    return std::make_unique<optim::SequentialLR>(
        optimizer, std::vector<const optim::LRScheduler*>{first.get(), second.get()}, std::vector<int64_t>{warmup});
  };
  return schedule;
}

}  // namespace tandem::trainers

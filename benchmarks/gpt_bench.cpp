// gpt_bench: times one training step of a GPT (trainers::make_gpt) on one device as tandem-train's language-model
// task runs it: parallel::TrainingStep over the model in bf16 mixed precision (Module::set_precision(BFloat16)),
// nanoGPT's two AdamW groups (trainers::nanogpt_adamw: one fused update kernel per parameter), the gradients clipped
// to norm 1.0, the mean token cross-entropy as the loss. Eagerly (TrainingStepOptions::capture false) and captured
// as one CUDA graph (the default options), each beside the forward alone and the forward with the backward, so that
// the table shows where a step's time goes. benchmarks/torch_gpt.py step times the same step in PyTorch (eager and
// torch.compile), to be run in the same session: a reference figure is always measured beside tandem's.
//   --model baby (the default)
//            nanoGPT's character-level Shakespeare model: 6 layers, 6 heads, width 384, context 256, vocabulary 84,
//            dropout 0.2, batch 64
//   --model gpt2
//            GPT-2 124M: 12 layers, 12 heads, width 768, context 1024, vocabulary 50304, dropout 0, batch 16
// Method: the batch (random tokens) starts on the device. Each figure is the median over the timed samples, after a
// warm-up, of a loop of back-to-back steps between synchronizations divided by their number: a training loop's
// rate. Tokens per second are the batch's tokens over the captured step's time (the eager one's where the capture
// fell back, which its cell says, with the reason on stderr); MFU is nanoGPT's estimate of the model FLOPs
// (trainers::gpt_flops_per_token) over --peak-tflops (default 989.4: the dense bf16 peak of an H100 or H200 SXM).
// The peak memory is memory_stats' peak_allocated_bytes over the eager step's samples, its model and optimizer
// included (torch_gpt.py reports torch.cuda.max_memory_allocated the same way).
//
//   gpt_bench [--model baby|gpt2] [--dropout P] [--device cuda|cpu] [--steps N] [--peak-tflops F] [--markdown PATH]
//             [--profile eager|captured]
// --device cpu (eager only) with a small --steps checks the program where there is no GPU. --profile times nothing:
// after ten warm-up steps it runs --steps steps of that kind between cudaProfilerStart and cudaProfilerStop, for a
// profiler that records only that range (`ncu --profile-from-start off`, `nsys --capture-range cudaProfilerApi`).

#include <tandem/tandem.h>

#include <charconv>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "bench_support.h"

#if TANDEM_WITH_CUDA
#include <cuda_profiler_api.h>
#endif

namespace {

namespace bench = tandem::bench;
using tandem::Tensor;

constexpr int kLoop = 5;  // steps per sample

struct Options {
  std::string model = "baby";
  std::optional<double> dropout;  // none: the model's own
  std::string device = "cuda";
  int steps = 20;  // timed samples
  double peak_tflops = 989.4;
  std::string markdown;
  std::string profile;  // "", "eager" or "captured"
};

double parse_number(std::string_view name, std::string_view text, double least, double most) {
  double value = 0.0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  TANDEM_CHECK(error == std::errc() && end == text.data() + text.size() && value >= least && value <= most, name,
               " is ", tandem::excerpt(text), " but expected a number from ", least, " to ", most);
  return value;
}

Options parse(int argc, char** argv) {
  Options options;
  const char* usage =
      "usage: gpt_bench [--model baby|gpt2] [--dropout P] [--device cuda|cpu] [--steps N] [--peak-tflops F] "
      "[--markdown PATH] [--profile eager|captured]";
  const bench::Flag dropout{"--dropout", [&options](std::string_view text) {
                              options.dropout = parse_number("--dropout", text, 0.0, 0.99);
                            }};
  const bench::Flag peak{"--peak-tflops", [&options](std::string_view text) {
                           options.peak_tflops = parse_number("--peak-tflops", text, 1.0, 1e6);
                         }};
  bench::parse_flags(argc, argv, "gpt_bench", usage,
                     {bench::choice_flag("--model", options.model, {"baby", "gpt2"}), dropout,
                      bench::choice_flag("--device", options.device, {"cuda", "cpu"}),
                      bench::int_flag("--steps", options.steps, 1, 100000), peak,
                      bench::text_flag("--markdown", options.markdown),
                      bench::choice_flag("--profile", options.profile, {"eager", "captured"})});
  return options;
}

struct Workload {
  tandem::trainers::GPTConfig config;
  int64_t batch = 0;
};

Workload workload(const Options& options) {
  Workload w = options.model == "gpt2"
                   ? Workload{{.vocab_size = 50304, .block_size = 1024, .n_layer = 12, .n_head = 12, .n_embd = 768,
                               .dropout = 0.0},
                              16}
                   : Workload{{.vocab_size = 84, .block_size = 256, .n_layer = 6, .n_head = 6, .n_embd = 384,
                               .dropout = 0.2},
                              64};
  if (options.dropout) w.config.dropout = *options.dropout;
  return w;
}

// What one row of the table times.
enum class Phase { Forward, ForwardBackward, Step };

const char* name_of(Phase phase) {
  switch (phase) {
    case Phase::Forward: return "forward and loss";
    case Phase::ForwardBackward: return "forward, loss and backward";
    default: return "training step";
  }
}

// The workload's GPT, seeded as tandem-train seeds it, on `device` in bf16 mixed precision.
std::shared_ptr<tandem::trainers::GPT> placed_gpt(const Workload& w, const tandem::Device& device) {
  tandem::manual_seed(1337);
  std::shared_ptr<tandem::trainers::GPT> gpt = tandem::trainers::make_gpt(w.config);
  gpt->to(device);
  gpt->set_precision(tandem::Precision::BFloat16);
  return gpt;
}

// One model, its optimizer and step, and a batch of random tokens on `device`.
struct Setup {
  Setup(const tandem::Device& device, const Options& options, bool captured)
      : w(workload(options)),
        gpt(placed_gpt(w, device)),
        replica(gpt, {device}),
        optimizer(replica, tandem::trainers::nanogpt_adamw({.lr = 1e-4})),
        step(replica, optimizer, tandem::trainers::token_cross_entropy, {.capture = captured, .max_grad_norm = 1.0}),
        x(Tensor::randint(0, w.config.vocab_size, {w.batch, w.config.block_size}, device)),
        y(Tensor::randint(0, w.config.vocab_size, {w.batch, w.config.block_size}, device)) {}

  void run(Phase phase) {
    if (phase == Phase::Step) {
      step.step({.features = x, .targets = y});
      return;
    }
    const Tensor loss = tandem::trainers::token_cross_entropy(gpt->forward(x), y);
    if (phase == Phase::ForwardBackward) {
      loss.backward();
      gpt->zero_grad();
    }
  }

  Workload w;
  std::shared_ptr<tandem::trainers::GPT> gpt;
  tandem::parallel::ReplicatedModule replica;
  tandem::parallel::ReplicatedOptimizer optimizer;
  tandem::parallel::TrainingStep step;
  Tensor x, y;
};

// Median milliseconds of `phase`, and (a captured step only) why the step was not captured ("" when it was).
struct Timed {
  double ms;
  std::string fallback;  // why a captured phase ran eagerly; empty when it did not
  size_t peak_bytes;     // the device's peak allocation while the phase ran (the model and optimizer included)
};

Timed time_phase(const tandem::Device& device, const Options& options, Phase phase, bool captured) {
  Setup setup(device, options, captured);
  const bool cpu = !device.is_cuda();
  tandem::reset_peak_memory_stats(device);
  const double ms = bench::median_ms_per_call({device},
                                              {.warmup = cpu ? 1 : 10, .samples = options.steps,
                                               .iterations = cpu ? 1 : kLoop},
                                              [&] { setup.run(phase); });
  return {ms, captured && !setup.step.captured() ? setup.step.fallback_reason() : std::string(),
          tandem::memory_stats(device).peak_allocated_bytes};
}

// --profile: ten warm-up steps, then --steps steps inside the profiler's range.
int profile(const tandem::Device& device, const Options& options) {
#if TANDEM_WITH_CUDA
  Setup setup(device, options, options.profile == "captured");
  for (int i = 0; i < 10; ++i) setup.run(Phase::Step);
  bench::synchronize({device});
  TANDEM_CHECK(cudaProfilerStart() == cudaSuccess, "gpt_bench: cudaProfilerStart failed");
  for (int i = 0; i < options.steps; ++i) setup.run(Phase::Step);
  bench::synchronize({device});
  TANDEM_CHECK(cudaProfilerStop() == cudaSuccess, "gpt_bench: cudaProfilerStop failed");
  std::cout << "gpt_bench: profiled " << options.steps << " " << options.profile << " steps"
            << (setup.step.captured() ? " (captured)" : "") << "\n";
  return 0;
#else
  (void)device;
  (void)options;
  TANDEM_FAIL("gpt_bench: --profile needs a CUDA build");
#endif
}

int run(const Options& options) {
  const std::optional<tandem::Device> chosen = bench::flag_device(options.device, "gpt_bench");
  if (!chosen) return 0;
  if (!options.markdown.empty()) tandem::check_writable(options.markdown, "--markdown");
  const tandem::Device device = *chosen;
  const bool cuda = device.is_cuda();
  if (!options.profile.empty()) return profile(device, options);
  const Workload w = workload(options);
  std::ostringstream table;
  table << "| phase | eager ms | captured ms |\n|---|---|---|\n";
  double step_ms = 0.0;
  size_t step_peak = 0;
  for (const Phase phase : {Phase::Forward, Phase::ForwardBackward, Phase::Step}) {
    const Timed eager_run = time_phase(device, options, phase, false);
    const double eager = eager_run.ms;
    table << "| " << name_of(phase) << " | " << bench::ms_cell(eager) << " | ";
    step_ms = eager;
    step_peak = eager_run.peak_bytes;
    if (phase != Phase::Step || !cuda) {
      table << "- |\n";  // only the step is captured, and only on a CUDA device
      continue;
    }
    const Timed captured = time_phase(device, options, phase, true);
    table << bench::ms_cell(captured.ms) << (captured.fallback.empty() ? "" : " (ran eagerly)") << " |\n";
    if (captured.fallback.empty()) step_ms = captured.ms;
    if (!captured.fallback.empty()) std::cerr << "captured step ran eagerly: " << captured.fallback << "\n";
  }
  const std::shared_ptr<tandem::trainers::GPT> gpt = tandem::trainers::make_gpt(w.config);
  const double tokens = static_cast<double>(w.batch * w.config.block_size);
  const double tokens_per_second = tokens / (step_ms / 1e3);
  const double flops = tandem::trainers::gpt_flops_per_token(*gpt, w.config.block_size) * tokens_per_second;
  table << "\n" << bench::formatted("%.0f", tokens_per_second) << " tokens/s, MFU "
        << bench::formatted("%.1f", 100.0 * flops / (options.peak_tflops * 1e12)) << "% of "
        << options.peak_tflops << " TFLOP/s; peak memory of the eager step "
        << bench::formatted("%.2f", static_cast<double>(step_peak) / (1u << 30)) << " GiB\n";
  std::cout << "tandem: GPT " << options.model << " (" << w.config.n_layer << " layers, width " << w.config.n_embd
            << ", batch " << w.batch << " x " << w.config.block_size << ", dropout " << w.config.dropout
            << ", bf16, AdamW, clip 1.0), milliseconds per call on " << device << " (median of loops of "
            << (cuda ? kLoop : 1) << ")\n\n"
            << table.str();
  if (!options.markdown.empty()) tandem::write_file_atomically(options.markdown, table.str(), "--markdown");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::exit_status("gpt_bench", [&] { return run(parse(argc, argv)); });
}

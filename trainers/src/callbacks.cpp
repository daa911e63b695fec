#include "tandem/trainers/callbacks.h"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/trainers/svg_chart.h"
#include "tandem/trainers/trainer.h"

namespace tandem::trainers {
namespace {

std::string format(const char* pattern, auto... values) {
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer), pattern, values...);
  return buffer;
}

std::string format_seconds(double seconds) {
  return seconds < 1.0 ? format("%.1f ms", seconds * 1e3) : format("%.2f s", seconds);
}

// Losses: two decimals in the target's units, or six significant digits when they are below 1.
std::string format_loss(double value) { return std::abs(value) >= 1.0 ? format("%.2f", value) : format("%.6g", value); }

int digits(int64_t value) { return static_cast<int>(std::to_string(value).size()); }

std::string epoch_line(const EpochReport& report) {
  std::string line = format("epoch %*lld/%lld  train_loss ", digits(report.epochs),
                            static_cast<long long>(report.epoch), static_cast<long long>(report.epochs)) +
                     format_loss(report.train_loss);
  if (report.test) {
    line += "  test_mse " + format_loss(report.test->mse) + format("  test_r2 %.4f", report.test->r2);
  }
  if (report.train_classes) line += format("  train_acc %.4f", report.train_classes->accuracy);
  if (report.test_classes) {
    line += "  test_loss " + format_loss(report.test_classes->cross_entropy) +
            format("  test_acc %.4f", report.test_classes->accuracy);
  }
  return line + "  " + format_seconds(report.seconds);
}

// A bar redrawn after every step would flood slow terminals when steps take microseconds, so it is redrawn at most
// this often (and always at an epoch's first step).
constexpr std::chrono::milliseconds kRedrawInterval(100);
constexpr int kBarWidth = 30;

}  // namespace

ProgressPrinter::ProgressPrinter(std::ostream& out, bool bar) : out_(out), bar_(bar) {}

std::shared_ptr<ProgressPrinter> ProgressPrinter::to_stdout() {
  return std::make_shared<ProgressPrinter>(std::cout, isatty(STDOUT_FILENO) == 1);
}

void ProgressPrinter::on_step_end(const Trainer&, const StepReport& report) {
  if (!bar_) return;
  const auto now = std::chrono::steady_clock::now();
  if (report.batch != 1 && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  const int filled = static_cast<int>(kBarWidth * report.batch / report.num_batches);
  const std::optional<double> loss = report.read_loss ? report.read_loss() : std::nullopt;
  out_ << '\r'
       << format("epoch %*lld/%lld [", digits(report.epochs), static_cast<long long>(report.epoch),
                 static_cast<long long>(report.epochs))
       << std::string(filled, '#') << std::string(kBarWidth - filled, '.')
       << format("] %lld/%lld", static_cast<long long>(report.batch), static_cast<long long>(report.num_batches))
       << (loss ? "  loss " + format_loss(*loss) : "") << "\x1b[K" << std::flush;
}

void ProgressPrinter::on_epoch_end(const Trainer&, const EpochReport& report) {
  if (bar_) out_ << "\r\x1b[K";
  out_ << epoch_line(report) << '\n' << std::flush;
}

MetricsLogger::MetricsLogger(const std::string& path, bool append) : path_(path), append_(append) {
  check_writable(path, "MetricsLogger");
}

void MetricsLogger::on_fit_begin(const Trainer& trainer) {
  if (append_) lines_ = read_lines(path_);
  std::erase_if(lines_, [&](const Line& line) { return line.epoch > trainer.epoch(); });
  write_lines();
}

void MetricsLogger::on_epoch_end(const Trainer&, const EpochReport& report) {
  nlohmann::ordered_json line = {
      {"epoch", report.epoch}, {"epochs", report.epochs}, {"step", report.step}, {"train_loss", report.train_loss}};
  if (report.test) {
    line["test_mse"] = report.test->mse;
    line["test_r2"] = report.test->r2;
  }
  if (report.train_classes) line["train_accuracy"] = report.train_classes->accuracy;
  if (report.test_classes) {
    line["test_loss"] = report.test_classes->cross_entropy;
    line["test_accuracy"] = report.test_classes->accuracy;
  }
  line["seconds"] = report.seconds;
  lines_.push_back({report.epoch, line.dump()});
  write_lines();
}

std::vector<MetricsLogger::Line> MetricsLogger::read_lines(const std::string& path) {
  std::error_code error;
  const bool exists = std::filesystem::exists(path, error);
  TANDEM_CHECK(!error, "MetricsLogger: cannot read \"", path, "\" to resume it: ", error.message());
  if (!exists) return {};
  std::ifstream file(path, std::ios::binary);
  TANDEM_CHECK(file.is_open(), "MetricsLogger: cannot open \"", path, "\" to resume it");
  std::vector<Line> lines;
  int64_t number = 0;
  for (std::string text; std::getline(file, text);) {
    ++number;
    const nlohmann::json entry = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    const bool has_epoch = entry.is_object() && entry.contains("epoch") && entry["epoch"].is_number_unsigned() &&
                           entry["epoch"].get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX);
    TANDEM_CHECK(has_epoch, "MetricsLogger: \"", path, "\" line ", number,
                 " is not a JSON object with a non-negative integer \"epoch\": ", excerpt(text));
    lines.push_back({entry["epoch"].get<int64_t>(), std::move(text)});
  }
  TANDEM_CHECK(!file.bad(), "MetricsLogger: reading \"", path, "\" failed after line ", number);
  return lines;
}

void MetricsLogger::write_lines() const {
  std::string text;
  for (const Line& line : lines_) text.append(line.json).push_back('\n');
  write_file_atomically(path_, text, "MetricsLogger");
}

PlotWriter::PlotWriter(std::string path) : path_(std::move(path)) { check_writable(path_, "PlotWriter"); }

void PlotWriter::on_epoch_end(const Trainer& trainer, const EpochReport& report) {
  const bool classifier = trainer.options().task == Task::Classification;
  epochs_.push_back(static_cast<double>(report.epoch));
  train_loss_.push_back(report.train_loss);
  test_loss_.push_back(report.test_classes ? report.test_classes->cross_entropy : report.test ? report.test->mse : NAN);
  train_metric_.push_back(report.train_classes ? report.train_classes->accuracy : NAN);
  test_metric_.push_back(report.test_classes ? report.test_classes->accuracy : report.test ? report.test->r2 : NAN);
  const std::string loss_name = trainer.options().loss.name;
  LineChart loss{"loss (" + loss_name + ")", "epoch", loss_name, epochs_, {{"train", train_loss_}}};
  if (report.test || report.test_classes) loss.series.push_back({"test", test_loss_});
  LineChart metric{classifier ? "accuracy" : "R^2", "epoch", classifier ? "accuracy" : "R^2", epochs_, {}};
  if (classifier) metric.series.push_back({"train", train_metric_});
  if (report.test || report.test_classes) metric.series.push_back({"test", test_metric_});
  std::vector<LineChart> charts = {loss};
  if (!metric.series.empty()) charts.push_back(metric);
  write_file_atomically(path_, render_svg(charts), "PlotWriter");
}

CheckpointSaver::CheckpointSaver(std::string path, int64_t every) : path_(std::move(path)), every_(every) {
  TANDEM_CHECK(every >= 1, "CheckpointSaver: every is ", every, " but expected at least 1");
  check_writable(path_, "CheckpointSaver");
}

void CheckpointSaver::on_epoch_end(const Trainer& trainer, const EpochReport& report) {
  if (report.epoch % every_ == 0 || report.epoch == report.epochs) trainer.save_checkpoint(path_);
}

}  // namespace tandem::trainers

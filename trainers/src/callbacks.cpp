#include "tandem/trainers/callbacks.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

JsonLinesFile::JsonLinesFile(std::string path, std::string key, std::string owner,
                             std::chrono::milliseconds sync_interval)
    : path_(std::move(path)), key_(std::move(key)), owner_(std::move(owner)), sync_interval_(sync_interval) {
  TANDEM_CHECK(sync_interval.count() >= 0, owner_, ": sync_interval is ", sync_interval.count(),
               " ms but expected at least 0");
  check_writable(path_, owner_.c_str());
}

JsonLinesFile::~JsonLinesFile() { close_file(); }

// Note [Paced file writes] in callbacks.h: the whole file once, atomically, then lines appended to it.
void JsonLinesFile::begin(bool resume, int64_t keep_up_to) {
  close_file();
  if (resume) lines_ = read_lines();
  std::erase_if(lines_, [&](const Line& line) { return line.counter > keep_up_to; });
  write_lines();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  TANDEM_CHECK(fd_ >= 0, owner_, ": cannot open \"", path_, "\" to append to it: ", std::strerror(errno));
  last_sync_ = std::chrono::steady_clock::now();
}

void JsonLinesFile::append(int64_t counter, const std::string& line, bool last) {
  TANDEM_CHECK(fd_ >= 0, owner_, ": a line appended before the file was begun");
  lines_.push_back({counter, line});
  const std::string text = line + "\n";
  for (size_t done = 0; done < text.size();) {
    const ssize_t put = ::write(fd_, text.data() + done, text.size() - done);
    if (put < 0 && errno == EINTR) continue;
    TANDEM_CHECK(put > 0, owner_, ": appending to \"", path_, "\" failed: ", std::strerror(put < 0 ? errno : ENOSPC));
    done += static_cast<size_t>(put);
  }
  if (last || std::chrono::steady_clock::now() - last_sync_ >= sync_interval_) sync();
}

void JsonLinesFile::end() {
  sync();
  close_file();
}

void JsonLinesFile::sync() {
  if (fd_ < 0) return;
  while (::fsync(fd_) != 0) {
    TANDEM_CHECK(errno == EINTR, owner_, ": fsync of \"", path_, "\" failed: ", std::strerror(errno));
  }
  last_sync_ = std::chrono::steady_clock::now();
}

void JsonLinesFile::close_file() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::vector<JsonLinesFile::Line> JsonLinesFile::read_lines() const {
  std::error_code error;
  const bool exists = std::filesystem::exists(path_, error);
  TANDEM_CHECK(!error, owner_, ": cannot read \"", path_, "\" to resume it: ", error.message());
  if (!exists) return {};
  std::ifstream file(path_, std::ios::binary);
  TANDEM_CHECK(file.is_open(), owner_, ": cannot open \"", path_, "\" to resume it");
  std::vector<Line> lines;
  int64_t number = 0;
  for (std::string text; std::getline(file, text);) {
    ++number;
    // A last line without its newline is the tail of an append that a power loss cut (Note [Paced file writes]).
    if (file.eof()) break;
    const nlohmann::json entry = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    const bool has_counter = entry.is_object() && entry.contains(key_) && entry[key_].is_number_unsigned() &&
                             entry[key_].get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX);
    TANDEM_CHECK(has_counter, owner_, ": \"", path_, "\" line ", number,
                 " is not a JSON object with a non-negative integer \"", key_, "\": ", excerpt(text));
    lines.push_back({entry[key_].get<int64_t>(), std::move(text)});
  }
  TANDEM_CHECK(!file.bad(), owner_, ": reading \"", path_, "\" failed after line ", number);
  return lines;
}

void JsonLinesFile::write_lines() const {
  std::string text;
  for (const Line& line : lines_) text.append(line.json).push_back('\n');
  write_file_atomically(path_, text, owner_.c_str());
}

MetricsLogger::MetricsLogger(const std::string& path, bool append, std::chrono::milliseconds sync_interval)
    : file_(path, "epoch", "MetricsLogger", sync_interval), append_(append) {}

void MetricsLogger::on_fit_begin(const Trainer& trainer) { file_.begin(append_, trainer.epoch()); }

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
  file_.append(report.epoch, line.dump(), report.epoch == report.epochs);
}

void MetricsLogger::on_fit_end(const Trainer&, const FitResult&) { file_.end(); }

PlotWriter::PlotWriter(std::string path, std::chrono::milliseconds interval)
    : path_(std::move(path)), interval_(interval) {
  TANDEM_CHECK(interval.count() >= 0, "PlotWriter: interval is ", interval.count(), " ms but expected at least 0");
  check_writable(path_, "PlotWriter");
}

PlotWriter::~PlotWriter() {
  if (!pending_) return;
  try {
    draw();
  } catch (const std::exception&) {
    // best effort: the image is a view of the run, and the run's error is what matters
  }
}

void PlotWriter::on_epoch_end(const Trainer& trainer, const EpochReport& report) {
  classifier_ = trainer.options().task == Task::Classification;
  has_test_ = report.test || report.test_classes;
  loss_name_ = trainer.options().loss.name;
  epochs_.push_back(static_cast<double>(report.epoch));
  train_loss_.push_back(report.train_loss);
  test_loss_.push_back(report.test_classes ? report.test_classes->cross_entropy : report.test ? report.test->mse : NAN);
  train_metric_.push_back(report.train_classes ? report.train_classes->accuracy : NAN);
  test_metric_.push_back(report.test_classes ? report.test_classes->accuracy : report.test ? report.test->r2 : NAN);
  pending_ = true;
  const bool due = !drawn_once_ || std::chrono::steady_clock::now() - last_draw_ >= interval_;
  if (report.epoch == report.epochs || due) draw();
}

void PlotWriter::on_fit_end(const Trainer&, const FitResult&) {
  if (pending_) draw();
}

void PlotWriter::draw() {
  LineChart loss{"loss (" + loss_name_ + ")", "epoch", loss_name_, epochs_, {{"train", train_loss_, kTrainColour}}};
  loss.log_y = true;
  if (has_test_) loss.series.push_back({"test", test_loss_, kTestColour});
  LineChart metric{classifier_ ? "accuracy" : "R^2", "epoch", classifier_ ? "accuracy" : "R^2", epochs_, {}};
  if (classifier_) metric.series.push_back({"train", train_metric_, kTrainColour});
  if (has_test_) metric.series.push_back({"test", test_metric_, kTestColour});
  std::vector<LineChart> charts = {loss};
  if (!metric.series.empty()) charts.push_back(metric);
  write_file_atomically(path_, render_svg(charts), "PlotWriter");
  pending_ = false;
  drawn_once_ = true;
  last_draw_ = std::chrono::steady_clock::now();
}

CheckpointSaver::CheckpointSaver(std::string path, int64_t every) : path_(std::move(path)), every_(every) {
  TANDEM_CHECK(every >= 1, "CheckpointSaver: every is ", every, " but expected at least 1");
  check_writable(path_, "CheckpointSaver");
}

void CheckpointSaver::on_epoch_end(const Trainer& trainer, const EpochReport& report) {
  if (report.epoch % every_ == 0 || report.epoch == report.epochs) trainer.save_checkpoint(path_);
}

}  // namespace tandem::trainers

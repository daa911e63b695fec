// train_step_bench: times one data-parallel training step (scatter, forward, MSE, backward, gradient all-reduce, SGD
// with momentum) on 1 and N GPUs for two workloads, eagerly (trainers::train_step) and captured as one CUDA graph
// (parallel::CapturedStep), and prints a markdown table of tandem's figures. PyTorch's and LibTorch's figures for the
// same steps come from benchmarks/torch_train_step.py and benchmarks/libtorch_step/, run in the same session: a
// reference figure is always measured beside tandem's, never typed in.
//   seed  Linear(10, 20) -> Linear(20, 1), global batch 4096
//   wide  4 x Linear(4096, 4096) with ReLU between, global batch 8192, float32
// Method: the inputs and targets start on cuda:0; every GPU is synchronized (cudaDeviceSynchronize) before and
// after each step, and the host wall clock between is the step's time; the median over the timed steps, after a
// warm-up, is reported.
//
// With --widths W1,W2,... it sweeps 4 x Linear(W) with ReLU between (global batch 8192, float32) on N GPUs instead,
// eager and captured, and writes one JSON line per width and mode to --jsonl (benchmarks/width_sweep.sh draws them
// beside PyTorch's DDP).
//
//   train_step_bench [--gpus N] [--markdown PATH] [--widths W1,W2,... --jsonl PATH]

#include <tandem/tandem.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "bench_support.h"

namespace {

namespace bench = tandem::bench;

struct Workload {
  std::string name;
  int64_t batch;
  int64_t inputs;
  int64_t outputs;
  int warmup;
  int steps;
  std::function<std::shared_ptr<tandem::nn::Module>()> make;
};

std::vector<Workload> workloads() {
  using namespace tandem;
  auto seed = [] { return trainers::make_mlp(10, 20); };
  return {{"seed net, batch 4096", 4096, 10, 1, 50, 500, seed},
          {"wide MLP, batch 8192", 8192, 4096, 4096, 5, 30, bench::wide_mlp}};
}

constexpr int64_t kSweepBatch = 8192;  // torch_ddp_bench.py --widths uses the same global batch

Workload sweep_workload(int64_t width) {
  return {"4 x Linear(" + std::to_string(width) + "), batch " + std::to_string(kSweepBatch), kSweepBatch, width,
          width, 5, 30, [width] { return bench::mlp(width); }};
}

struct Options {
  int gpus = 2;
  std::string markdown;
  std::string widths;
  std::string jsonl;
  std::vector<int64_t> sweep;  // parsed from widths
};

Options parse(int argc, char** argv) {
  Options options;
  const char* usage = "usage: train_step_bench [--gpus N] [--markdown PATH] [--widths W1,W2,... --jsonl PATH]";
  bench::parse_flags(argc, argv, "train_step_bench", usage,
                     {bench::int_flag("--gpus", options.gpus, 1, 1024), bench::text_flag("--markdown", options.markdown),
                      bench::text_flag("--widths", options.widths), bench::text_flag("--jsonl", options.jsonl)});
  if (options.widths.empty()) {
    TANDEM_CHECK(options.jsonl.empty(), "--jsonl goes with --widths; ", usage);
    return options;
  }
  TANDEM_CHECK(!options.jsonl.empty(), "--widths needs --jsonl PATH; ", usage);
  std::string_view rest = options.widths;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    int64_t width = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), width);
    TANDEM_CHECK(error == std::errc() && end == item.data() + item.size() && width >= 1 && width <= 65536,
                 "--widths names ", tandem::excerpt(item), " but expected integers in [1, 65536]");
    options.sweep.push_back(width);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return options;
}

#if TANDEM_WITH_CUDA

// Median milliseconds of one step of `workload` on `devices`, eager (train_step) or captured (CapturedStep). A
// captured step that falls back to the eager one is reported on stderr, with the reason.
double time_step(const Workload& workload, const std::vector<tandem::Device>& devices, bool captured) {
  using namespace tandem;
  manual_seed(0);
  std::shared_ptr<nn::Module> model = workload.make();
  model->to(devices.front());
  parallel::ReplicatedModule replicas(model, devices);
  parallel::ReplicatedSGD sgd(replicas, {.lr = 1e-4, .momentum = 0.9});
  const Tensor x = Tensor::randn({workload.batch, workload.inputs}, devices.front());
  const Tensor y = Tensor::randn({workload.batch, workload.outputs}, devices.front());
  const bench::Sampling sampling{.warmup = workload.warmup, .samples = workload.steps};
  if (!captured) {
    return bench::median_ms_per_call(devices, sampling, [&] { trainers::train_step(replicas, sgd, x, y); });
  }
  parallel::CapturedStep step(replicas, sgd, nn::mse_loss);
  const double ms = bench::median_ms_per_call(devices, sampling, [&] { step.step(x, y); });
  if (!step.captured()) std::cerr << workload.name << ": ran eagerly: " << step.fallback_reason() << "\n";
  return ms;
}

// Milliseconds as the table prints them.
std::string cell(double ms) { return bench::formatted(ms < 10 ? "%.3f" : "%.1f", ms); }

// The --widths sweep: one JSON line per width and mode, on `gpus` GPUs.
int sweep(const Options& options, int gpus) {
  tandem::check_writable(options.jsonl, "--jsonl");
  std::vector<tandem::Device> devices;
  for (int g = 0; g < gpus; ++g) devices.push_back(tandem::Device::cuda(g));
  std::ostringstream lines;
  for (const int64_t width : options.sweep) {
    const Workload workload = sweep_workload(width);
    for (const bool captured : {false, true}) {
      const double ms = time_step(workload, devices, captured);
      const std::string line = bench::formatted(
          "{\"framework\": \"tandem\", \"mode\": \"%s\", \"devices\": %d, \"width\": %lld, \"global_batch\": %lld, "
          "\"median_ms\": %.6f}",
          captured ? "captured" : "eager", gpus, static_cast<long long>(width), static_cast<long long>(kSweepBatch), ms);
      std::cout << line << std::endl;
      lines << line << "\n";
    }
  }
  tandem::write_file_atomically(options.jsonl, lines.str(), "--jsonl");
  return 0;
}

int run(const Options& options) {
  const int gpus = std::min(options.gpus, tandem::cuda_device_count());
  if (gpus < 1) {
    std::cout << "train_step_bench: no GPU visible; nothing to measure\n";
    return 0;
  }
  if (!options.sweep.empty()) return sweep(options, gpus);
  if (!options.markdown.empty()) tandem::check_writable(options.markdown, "--markdown");
  std::ostringstream table;
  table << "| workload | eager 1 GPU | captured 1 GPU | eager " << gpus << " GPUs | captured " << gpus << " GPUs |\n"
        << "|---|---|---|---|---|\n";
  for (const Workload& workload : workloads()) {
    std::vector<tandem::Device> devices;
    for (int g = 0; g < gpus; ++g) devices.push_back(tandem::Device::cuda(g));
    table << "| " << workload.name;
    for (const bool captured : {false, true}) table << " | " << cell(time_step(workload, {devices.front()}, captured));
    for (const bool captured : {false, true}) {
      table << " | " << (gpus > 1 ? cell(time_step(workload, devices, captured)) : "-");
    }
    table << " |\n";
    std::cerr << "measured " << workload.name << "\n";
  }
  std::cout << "tandem: milliseconds per training step (median; eager: trainers::train_step, captured: "
            << "parallel::CapturedStep)\n\n"
            << table.str();
  if (!options.markdown.empty()) tandem::write_file_atomically(options.markdown, table.str(), "--markdown");
  return 0;
}

#else

int run(const Options&) {
  std::cout << "train_step_bench: tandem was built without CUDA; nothing to measure\n";
  return 0;
}

#endif

}  // namespace

int main(int argc, char** argv) {
  return bench::exit_status("train_step_bench", [&] { return run(parse(argc, argv)); });
}

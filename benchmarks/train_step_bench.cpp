// train_step_bench: times one data-parallel training step (scatter, forward, MSE, backward, gradient all-reduce, SGD
// with momentum) on 1 and N GPUs for two workloads through parallel::TrainingStep, eagerly
// (TrainingStepOptions::capture false) and captured as one CUDA graph (its default options), and prints a markdown
// table of tandem's figures. PyTorch's and LibTorch's figures for the same steps come from
// benchmarks/torch_train_step.py and benchmarks/libtorch_step/, run in the same session: a reference figure is always
// measured beside tandem's, never typed in.
//   seed  Linear(10, 20) -> Linear(20, 1), global batch 4096
//   wide  4 x Linear(4096, 4096) with ReLU between, global batch 8192, float32
// Method: the inputs and targets start on cuda:0 (in the last column, already cut over the GPUs, chunk i on GPU i, as
// each rank of a multi-process job holds its own rows: TrainingBatch::inputs and labels). Two figures per step, each
// the median over the timed samples after a warm-up:
//   synchronized  every GPU is synchronized (cudaDeviceSynchronize) before and after each step; the host wall clock
//                 between is the step's latency, launch and host work included;
//   in a loop     the same over a loop of back-to-back steps (20 for the seed net, 4 for the wide MLP), divided by
//                 their number: the rate of a training loop that does not wait for each step (the Trainer reads its
//                 losses once per epoch), where the host's work for one step overlaps the device's for the last.
// The table also gives the kernels of each captured graph (DeviceGraph::kernel_nodes).
//
// With --widths W1,W2,... it sweeps 4 x Linear(W) with ReLU between (global batch 8192 or --batch, float32 or
// --precision) on N GPUs instead, eager, captured and (N > 1) captured with the batch already on the GPUs
// ("captured-resident"), synchronized, and writes one JSON line per width and mode to --jsonl
// (benchmarks/width_sweep.sh draws them beside PyTorch's DDP).
// --dot PREFIX writes each captured seed-net graph as Graphviz text (PREFIX-1gpu.dot, PREFIX-<N>gpu.dot).
// --workload seed|wide measures that workload only (default: both).
//
//   train_step_bench [--gpus N] [--markdown PATH] [--dot PREFIX] [--workload seed|wide]
//                    [--widths W1,W2,... --jsonl PATH [--batch B] [--precision fp32|tf32|bf16]]

#include <tandem/tandem.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "bench_support.h"

namespace {

namespace bench = tandem::bench;

struct Workload {
  std::string name;
  std::string key;  // in the names of --dot's files
  int64_t batch;
  int64_t inputs;
  int64_t outputs;
  int warmup;
  int steps;  // timed samples of one synchronized step
  int loop;   // steps per sample in a loop
  int loops;  // timed samples of a loop
  std::function<std::shared_ptr<tandem::nn::Module>()> make;
};

std::vector<Workload> workloads() {
  using namespace tandem;
  auto seed = [] { return trainers::make_mlp(10, 20); };
  return {{"seed net, batch 4096", "seed", 4096, 10, 1, 50, 500, 20, 50, seed},
          {"wide MLP, batch 8192", "wide", 8192, 4096, 4096, 5, 30, 4, 8, bench::wide_mlp}};
}

Workload sweep_workload(int64_t width, int64_t batch) {
  return {"4 x Linear(" + std::to_string(width) + "), batch " + std::to_string(batch),
          "width",
          batch,
          width,
          width,
          5,
          30,
          1,
          1,
          [width] { return bench::mlp(width); }};
}

struct Options {
  int gpus = 2;
  std::string markdown;
  std::string dot;
  std::string workload;  // a Workload::key, or empty for every workload
  std::string widths;
  std::string jsonl;
  int batch = 8192;  // the sweep's global batch; torch_ddp_bench.py --widths uses the same by default
  std::string precision = "fp32";
  std::vector<int64_t> sweep;  // parsed from widths
};

Options parse(int argc, char** argv) {
  Options options;
  const char* usage =
      "usage: train_step_bench [--gpus N] [--markdown PATH] [--dot PREFIX] [--workload seed|wide] [--widths "
      "W1,W2,... --jsonl PATH "
      "[--batch B] [--precision fp32|tf32|bf16]]";
  bench::parse_flags(
      argc, argv, "train_step_bench", usage,
      {bench::int_flag("--gpus", options.gpus, 1, 1024), bench::text_flag("--markdown", options.markdown),
       bench::text_flag("--dot", options.dot), bench::text_flag("--workload", options.workload),
       bench::text_flag("--widths", options.widths), bench::text_flag("--jsonl", options.jsonl),
       bench::int_flag("--batch", options.batch, 1, 1 << 20), bench::text_flag("--precision", options.precision)});
  (void)tandem::parse_precision(options.precision);  // refuses an unknown name now
  TANDEM_CHECK(options.workload.empty() || options.workload == "seed" || options.workload == "wide",
               "--workload names ", tandem::excerpt(options.workload), " but expected seed or wide; ", usage);
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

// How one configuration's steps are timed.
struct Timing {
  bool captured = false;
  bool loop = false;      // back-to-back steps (Workload::loop per sample) instead of synchronized ones
  bool resident = false;  // captured only: the batch starts cut over the devices (TrainingBatch::inputs, labels)
  std::optional<tandem::Precision> precision;
  std::string dot;            // where to write the captured graph (Graphviz); "" for nowhere
  size_t* kernels = nullptr;  // receives the captured graph's kernel count when not null
};

// Median milliseconds of one step of `workload` on `devices` through a parallel::TrainingStep, eager (capture off) or
// captured. A captured step that falls back to the eager one is reported on stderr, with the reason.
double time_step(const Workload& workload, const std::vector<tandem::Device>& devices, const Timing& timing) {
  using namespace tandem;
  manual_seed(0);
  std::shared_ptr<nn::Module> model = workload.make();
  model->to(devices.front());
  if (timing.precision) model->set_precision(*timing.precision);
  parallel::ReplicatedModule replicas(model, devices);
  parallel::ReplicatedSGD sgd(replicas, {.lr = 1e-4, .momentum = 0.9});
  const Tensor x = Tensor::randn({workload.batch, workload.inputs}, devices.front());
  const Tensor y = Tensor::randn({workload.batch, workload.outputs}, devices.front());
  const bench::Sampling sampling =
      timing.loop ? bench::Sampling{.warmup = workload.warmup, .samples = workload.loops, .iterations = workload.loop}
                  : bench::Sampling{.warmup = workload.warmup, .samples = workload.steps};
  if (!timing.captured) {
    parallel::TrainingStep eager(replicas, sgd, nn::mse_loss, {.capture = false});
    return bench::median_ms_per_call(devices, sampling, [&] { eager.step({.features = x, .targets = y}); });
  }
  parallel::TrainingStep step(replicas, sgd, nn::mse_loss);
  std::vector<Tensor> x_chunks;
  std::vector<Tensor> y_chunks;
  if (timing.resident) {
    x_chunks = comm::scatter(x, devices);
    y_chunks = comm::scatter(y, devices);
  }
  const double ms = bench::median_ms_per_call(devices, sampling, [&] {
    if (timing.resident) {
      step.step({.inputs = x_chunks, .labels = y_chunks});
    } else {
      step.step({.features = x, .targets = y});
    }
  });
  if (!step.captured()) {
    std::cerr << workload.name << ": ran eagerly: " << step.fallback_reason() << "\n";
    return ms;
  }
  if (timing.kernels != nullptr) *timing.kernels = step.last_graph()->kernel_nodes();
  if (!timing.dot.empty()) {
    step.last_graph()->debug_dump(timing.dot);
    std::cerr << "wrote " << timing.dot << " (" << step.last_graph()->nodes() << " nodes, "
              << step.last_graph()->kernel_nodes() << " kernels)\n";
  }
  return ms;
}

// Milliseconds as the table prints them.
// The --widths sweep: one JSON line per width and mode, on `gpus` GPUs.
int sweep(const Options& options, int gpus) {
  tandem::check_writable(options.jsonl, "--jsonl");
  std::vector<tandem::Device> devices;
  for (int g = 0; g < gpus; ++g) devices.push_back(tandem::Device::cuda(g));
  std::ostringstream lines;
  const tandem::Precision precision = tandem::parse_precision(options.precision);
  for (const int64_t width : options.sweep) {
    const Workload workload = sweep_workload(width, options.batch);
    for (const std::string mode : {"eager", "captured", "captured-resident"}) {
      if (mode == "captured-resident" && gpus == 1) continue;  // the same as "captured" on one GPU
      const Timing timing{.captured = mode != "eager", .resident = mode == "captured-resident", .precision = precision};
      const double ms = time_step(workload, devices, timing);
      const std::string line = bench::formatted(
          "{\"framework\": \"tandem\", \"mode\": \"%s\", \"devices\": %d, \"width\": %lld, \"global_batch\": %lld, "
          "\"precision\": \"%s\", \"median_ms\": %.6f}",
          mode.c_str(), gpus, static_cast<long long>(width), static_cast<long long>(options.batch),
          options.precision.c_str(), ms);
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
  table << "| workload | step | eager 1 GPU | captured 1 GPU | eager " << gpus << " GPUs | captured " << gpus
        << " GPUs | captured " << gpus << " GPUs, batch on its GPUs |\n|---|---|---|---|---|---|---|\n";
  std::ostringstream kernels;
  for (const Workload& workload : workloads()) {
    if (!options.workload.empty() && options.workload != workload.key) continue;
    std::vector<std::vector<tandem::Device>> layouts = {{tandem::Device::cuda(0)}};
    if (gpus > 1) {
      layouts.emplace_back();
      for (int g = 0; g < gpus; ++g) layouts.back().push_back(tandem::Device::cuda(g));
    }
    for (const bool loop : {false, true}) {
      table << "| " << workload.name << " | "
            << (loop ? "in a loop of " + std::to_string(workload.loop) : std::string("synchronized"));
      for (size_t l = 0; l < 2; ++l) {
        for (const bool captured : {false, true}) {
          if (l >= layouts.size()) {
            table << " | -";
            continue;
          }
          const size_t count = layouts[l].size();
          size_t graph_kernels = 0;
          Timing timing{.captured = captured, .loop = loop, .kernels = &graph_kernels};
          if (captured && !loop && !options.dot.empty() && workload.key == "seed") {
            timing.dot = options.dot + "-" + std::to_string(count) + "gpu.dot";
          }
          table << " | " << bench::ms_cell(time_step(workload, layouts[l], timing));
          if (captured && !loop) {
            kernels << "- " << workload.name << ", " << count << (count == 1 ? " GPU: " : " GPUs: ") << graph_kernels
                    << " kernels in the captured graph\n";
          }
        }
      }
      table << " | "
            << (layouts.size() > 1
                    ? bench::ms_cell(
                          time_step(workload, layouts[1], {.captured = true, .loop = loop, .resident = true}))
                    : std::string("-"))
            << " |\n";
    }
    std::cerr << "measured " << workload.name << "\n";
  }
  table << "\n" << kernels.str();
  std::cout << "tandem: milliseconds per training step (median; eager and captured: parallel::TrainingStep)\n\n"
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

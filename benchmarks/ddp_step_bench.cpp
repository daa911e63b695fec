// ddp_step_bench: times one step of multi-process data-parallel training, parallel::DistributedDataParallel over a
// comm::ProcessGroup (forward, MSE, backward with the buckets all-reduced over every process while backward goes on,
// SGD with momentum 0.9), eager and captured (parallel::TrainingStep over the same kind of DistributedDataParallel,
// summing its gradients: each process replays its step as one CUDA graph), and prints rank 0's median steps as JSON
// lines (median_ms: eager; captured_median_ms: captured, and captured_replayed false where its steps ran eagerly, as on
// CPU devices, with the reason on stderr). With --zero-stages 0,1,2 every workload is also timed at ZeRO stages 1
// (DistributedOptions::zero_stage 1: the buckets reduce-scattered, parallel::ShardedSGD updating each device's shard,
// the parameters all-gathered; eager and captured alike) and 2 (the reduced gradients sharded too; its TrainingStep
// runs eagerly), one line per stage, each with the optimizer state and the gradient buffers held per device between
// steps (optimizer_state_bytes_per_device, gradient_bytes_per_device) and the most memory the first local device held
// during one eager step (peak_allocated_bytes: MemoryStats, which on CPU devices counts the whole process).
// benchmarks/torch_ddp_bench.py runs the same workloads under PyTorch's DistributedDataParallel;
// benchmarks/ddp_suite.sh runs both and prints the comparison.
//
//   seed        Linear(10, 20) -> Linear(20, 1), global batch 4096                     (TANDEM_ALLOW_TF32 unset)
//   mid         4 x Linear(1024, 1024) with ReLU between, global batch 1024, FP32 (small enough for CPU devices)
//   wide        4 x Linear(4096, 4096) with ReLU between, global batch 8192, plain FP32 (TANDEM_ALLOW_TF32 unset)
//   wide-tf32   the same with TF32 tensor-op GEMMs                                     (TANDEM_ALLOW_TF32=1)
//   wide-bf16   the same in mixed precision, the model set to Precision::BFloat16: bfloat16 GEMM inputs, float32
//               weights, gradients and SGD state (tandem-train --precision bf16)       (TANDEM_ALLOW_TF32 unset)
//
// Launch (process p drives devices p*N .. p*N+N-1 of its machine, N = --devices-per-process, counted by the local
// rank):
//   mpirun -np 2 --bind-to none build/bin/ddp_step_bench                      # 2 processes x 1 GPU
//   build/bin/ddp_step_bench --devices-per-process 2                          # 1 process driving cuda:0, cuda:1
//   TANDEM_ALLOW_TF32=1 mpirun -np 2 --bind-to none -x TANDEM_ALLOW_TF32 build/bin/ddp_step_bench   # wide-tf32
//
// Method (the same in torch_ddp_bench.py): every rank builds the model from seed 0 and holds its share of the
// global batch already on its devices; after the warm-up steps, each timed step starts with every local device
// synchronized and a group barrier (so the ranks start together) and ends when every local device is synchronized
// again; the host wall clock between is the step's time, and rank 0 reports the median. The captured steps are timed
// the same way on a second model of the same start (its own DistributedDataParallel over the same group), after at
// least TrainingStep's eager warm-up and its capture (Note [Capturing a step]). Whether cuBLAS may use TF32
// follows TANDEM_ALLOW_TF32, read once per process (Note [TF32] in core/src/cuda/gemm_operand.cpp), so the TF32
// workload runs in its own launch and the workload list must agree with the environment. (ProcessGroup::all_reduce
// alone, beside raw NCCL: the nccl_mpi_allreduce benchmark.)
//
//   ddp_step_bench [--workloads seed,mid,wide,wide-bf16 | wide-tf32] [--devices-per-process N] [--device-type cuda|cpu]
//                  [--zero-stages 0[,1][,2]] [--bucket-mb N] [--steps N] [--jsonl PATH]
//
// --bucket-mb: the gradient buckets' size (DistributedOptions::bucket_size, 25 MiB by default as PyTorch's DDP).

#include <tandem/comm/process_group.h>
#include <tandem/parallel/distributed.h>
#include <tandem/parallel/sharded_optimizer.h>
#include <tandem/parallel/training_step.h>
#include <tandem/tandem.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "bench_support.h"

namespace {

using namespace tandem;

struct Workload {
  std::string key;    // as --workloads names it
  std::string title;  // as the tables name it
  int64_t global_batch;
  int64_t inputs;
  int64_t outputs;
  int warmup;
  int steps;
  bool tf32;
  std::optional<Precision> precision;  // set on the model; none: the process-wide default (TANDEM_ALLOW_TF32)
  std::function<std::shared_ptr<nn::Module>()> make;
};

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> all = {
      {"seed", "seed net, batch 4096", 4096, 10, 1, 50, 500, false, std::nullopt,
       [] { return trainers::make_mlp(10, 20); }},
      {"mid", "mid MLP fp32, batch 1024", 1024, 1024, 1024, 2, 10, false, std::nullopt,
       [] { return bench::mlp(1024); }},
      {"wide", "wide MLP fp32, batch 8192", 8192, 4096, 4096, 5, 30, false, std::nullopt, bench::wide_mlp},
      {"wide-tf32", "wide MLP TF32, batch 8192", 8192, 4096, 4096, 10, 100, true, std::nullopt, bench::wide_mlp},
      {"wide-bf16", "wide MLP bf16, batch 8192", 8192, 4096, 4096, 10, 100, false, Precision::BFloat16,
       bench::wide_mlp},
  };
  return all;
}

const Workload& find_workload(std::string_view key) {
  for (const Workload& workload : workloads())
    if (workload.key == key) return workload;
  TANDEM_FAIL("--workloads names ", excerpt(key), " but expected seed, mid, wide, wide-tf32 or wide-bf16");
}

bool tf32_allowed() {
  const char* allow = std::getenv("TANDEM_ALLOW_TF32");
  return allow != nullptr && std::string_view(allow) == "1";
}

struct Options {
  std::vector<std::string> workloads;  // empty: those the environment's TF32 setting allows
  int devices_per_process = 1;
  DeviceType device_type = DeviceType::CUDA;
  std::vector<int> zero_stages = {0};
  int bucket_mb = 25;  // DistributedOptions::bucket_size, in MiB
  int steps = 0;       // 0: each workload's own count
  std::string jsonl;
};

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    items.emplace_back(text.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return items;
}

Options parse(int argc, char** argv) {
  Options options;
  const auto workloads_flag = [&](std::string_view value) {
    options.workloads = split_list(value);
    for (const std::string& key : options.workloads) find_workload(key);
  };
  const auto zero_stages_flag = [&](std::string_view value) {
    options.zero_stages.clear();
    for (const std::string& stage : split_list(value)) {
      TANDEM_CHECK(stage == "0" || stage == "1" || stage == "2", "--zero-stages names ", excerpt(stage),
                   " but expected 0, 1 or 2");
      options.zero_stages.push_back(stage[0] - '0');
    }
  };
  const auto device_type_flag = [&](std::string_view value) {
    TANDEM_CHECK(value == "cuda" || value == "cpu", "--device-type is ", excerpt(value), " but expected cuda or cpu");
    options.device_type = value == "cuda" ? DeviceType::CUDA : DeviceType::CPU;
  };
  bench::parse_flags(
      argc, argv, "ddp_step_bench",
      "usage: ddp_step_bench [--workloads seed,mid,wide,wide-bf16 | wide-tf32] [--devices-per-process N] "
      "[--device-type cuda|cpu] [--zero-stages 0[,1][,2]] [--bucket-mb N] [--steps N] [--jsonl PATH]",
      {{"--workloads", workloads_flag},
       bench::int_flag("--devices-per-process", options.devices_per_process, 1, Device::kMaxCpuDevices),
       {"--device-type", device_type_flag},
       {"--zero-stages", zero_stages_flag},
       bench::int_flag("--bucket-mb", options.bucket_mb, 1, 1024),
       bench::int_flag("--steps", options.steps, 1, 1'000'000),
       bench::text_flag("--jsonl", options.jsonl)});
  return options;
}

// The workloads to run: those named, each checked against this process's TF32 setting, or by default every one
// that the setting allows.
std::vector<Workload> chosen_workloads(const Options& options) {
  const bool tf32 = options.device_type == DeviceType::CUDA && tf32_allowed();
  std::vector<Workload> chosen;
  if (options.workloads.empty()) {
    for (const Workload& workload : workloads())
      if (workload.tf32 == tf32) chosen.push_back(workload);
    return chosen;
  }
  for (const std::string& key : options.workloads) {
    const Workload& workload = find_workload(key);
    TANDEM_CHECK(workload.tf32 == tf32, "ddp_step_bench: workload ", key, " needs TANDEM_ALLOW_TF32 ",
                 workload.tf32 ? "=1 and CUDA devices" : "unset", " but this process runs with it ",
                 tf32 ? "=1" : "unset", " (cuBLAS reads it once per process: launch each setting separately)");
    chosen.push_back(workload);
  }
  return chosen;
}

// Milliseconds of `body` run between synchronized devices, after a barrier of the group.
double timed_ms(comm::ProcessGroup& group, const std::function<void()>& body) {
  bench::synchronize(group.devices());
  group.barrier();
  return bench::host_ms([&] {
    body();
    bench::synchronize(group.devices());
  });
}

// The workload's model from seed 0 on `device`, in its precision.
std::shared_ptr<nn::Module> model_of(const Workload& workload, Device device) {
  manual_seed(0);
  std::shared_ptr<nn::Module> model = workload.make();
  model->to(device);
  if (workload.precision) model->set_precision(*workload.precision);
  return model;
}

// The median of `steps` timed calls of `step`, after `warmup` untimed ones.
double median_step_ms(comm::ProcessGroup& group, int warmup, int steps, const std::function<void()>& step) {
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) times.push_back(timed_ms(group, step));
  return bench::median(times);
}

// SGD with momentum 0.9 over a model at its ZeRO stage: replicated at 0, sharded at 1 and 2.
class StageOptimizer {
 public:
  explicit StageOptimizer(parallel::DistributedDataParallel& ddp) {
    const optim::SGDOptions options{.lr = 1e-4, .momentum = 0.9};
    if (ddp.options().zero_stage == 0) {
      replicated_ = std::make_unique<parallel::ReplicatedSGD>(ddp.replicated(), options);
    } else {
      sharded_ = std::make_unique<parallel::ShardedSGD>(ddp, options);
    }
  }
  void zero_grad() { replicated_ ? replicated_->zero_grad() : sharded_->zero_grad(); }
  void step() { replicated_ ? replicated_->step() : sharded_->step(); }
  parallel::TrainingStep training_step(parallel::DistributedDataParallel& ddp) {
    if (replicated_) return parallel::TrainingStep(ddp, *replicated_, nn::mse_loss);
    return parallel::TrainingStep(ddp, *sharded_, nn::mse_loss);
  }
  // The momentum held by the first local device.
  size_t state_bytes_per_device() const {
    return replicated_ ? parallel::optimizer_state_bytes(replicated_->optimizer(0))
                       : sharded_->optimizer_state_bytes(0);
  }

 private:
  std::unique_ptr<parallel::ReplicatedSGD> replicated_;
  std::unique_ptr<parallel::ShardedSGD> sharded_;
};

// One JSON line: rank 0's median step of `workload` at `zero_stage`, eager and captured.
std::string time_workload(const Workload& workload, const std::shared_ptr<comm::ProcessGroup>& group, int zero_stage,
                          size_t bucket_size, int steps) {
  const std::vector<Device>& devices = group->devices();
  const auto shards = static_cast<int64_t>(group->world_devices());
  TANDEM_CHECK(workload.global_batch % shards == 0, "ddp_step_bench: global batch ", workload.global_batch, " of ",
               workload.key, " over ", shards, " devices but expected a batch that splits evenly");
  const int64_t rows = workload.global_batch / shards;

  std::vector<Tensor> inputs, targets;
  for (const Device& device : devices) {
    inputs.push_back(Tensor::randn({rows, workload.inputs}, device));
    targets.push_back(Tensor::randn({rows, workload.outputs}, device));
  }
  double eager_ms = 0.0;
  size_t state_bytes = 0;
  size_t gradient_bytes = 0;
  size_t peak_bytes = 0;
  {
    parallel::DistributedDataParallel ddp(model_of(workload, devices.front()), group,
                                          {.bucket_size = bucket_size, .zero_stage = zero_stage});
    StageOptimizer sgd(ddp);
    // Each local replica's loss is weighted by its share of the process's rows, so the sum over the local replicas
    // is the mean over the process's rows; the group's average over processes then gives the global batch's mean.
    const float share = 1.0f / static_cast<float>(devices.size());
    const auto step = [&] {
      sgd.zero_grad();
      ddp.forward_backward(inputs, [&](size_t replica, const Tensor& output) {
        const Tensor loss = nn::mse_loss(output, targets[replica]);
        return devices.size() == 1 ? loss : loss * share;
      });
      sgd.step();
    };
    eager_ms = median_step_ms(*group, workload.warmup, steps, step);
    state_bytes = sgd.state_bytes_per_device();
    const Tensor& gradients = ddp.replicated().gradient_buffer(0);
    gradient_bytes = static_cast<size_t>(gradients.numel()) * element_size(gradients.dtype());
    bench::synchronize(devices);
    reset_peak_memory_stats(devices.front());
    step();
    bench::synchronize(devices);
    peak_bytes = memory_stats(devices.front()).peak_allocated_bytes;
  }
  // The same steps captured: TrainingStep weights each replica's loss by its share of the global batch, and the group
  // sums the gradients over the processes, which gives the same global batch's mean.
  double captured_ms = 0.0;
  bool replayed = false;
  {
    parallel::DistributedDataParallel ddp(
        model_of(workload, devices.front()), group,
        {.bucket_size = bucket_size, .reduction = comm::ReduceOp::Sum, .zero_stage = zero_stage});
    StageOptimizer sgd(ddp);
    parallel::TrainingStep captured = sgd.training_step(ddp);
    const parallel::TrainingBatch batch{.inputs = inputs, .labels = targets, .global_rows = workload.global_batch};
    const int warmup = std::max(workload.warmup, parallel::TrainingStepOptions{}.warmup_steps + 1);
    captured_ms = median_step_ms(*group, warmup, steps, [&] { (void)captured.step(batch); });
    replayed = captured.captured();
    if (!replayed && group->rank() == 0) {
      std::cerr << "ddp_step_bench: " << workload.title << ", ZeRO stage " << zero_stage
                << ": the captured steps ran eagerly: " << captured.fallback_reason() << "\n";
    }
  }

  std::ostringstream line;
  line << "{\"framework\": \"tandem\", \"processes\": " << group->size()
       << ", \"devices_per_process\": " << devices.size() << ", \"device_type\": \""
       << (devices.front().is_cuda() ? "cuda" : "cpu") << "\", \"workload\": \"" << workload.key << "\", \"title\": \""
       << workload.title << "\", \"zero_stage\": " << zero_stage << ", \"bucket_mb\": " << bucket_size / (1 << 20)
       << ", \"optimizer_state_bytes_per_device\": " << state_bytes
       << ", \"gradient_bytes_per_device\": " << gradient_bytes << ", \"peak_allocated_bytes\": " << peak_bytes
       << ", \"global_batch\": " << workload.global_batch << ", \"warmup\": " << workload.warmup
       << ", \"steps\": " << steps << ", \"median_ms\": " << eager_ms << ", \"captured_median_ms\": " << captured_ms
       << ", \"captured_replayed\": " << (replayed ? "true" : "false") << "}";
  return line.str();
}

std::vector<std::string> measure(const Options& options, const std::vector<Workload>& chosen,
                                 const std::shared_ptr<comm::ProcessGroup>& group) {
  std::vector<std::string> lines;
  for (const Workload& workload : chosen) {
    for (const int zero_stage : options.zero_stages) {
      lines.push_back(time_workload(workload, group, zero_stage, static_cast<size_t>(options.bucket_mb) << 20,
                                    options.steps > 0 ? options.steps : workload.steps));
      if (group->rank() == 0) {
        std::cerr << "ddp_step_bench: measured " << workload.title << ", ZeRO stage " << zero_stage << "\n";
      }
    }
  }
  return lines;
}

int run(const Options& options) {
  const std::vector<Workload> chosen = chosen_workloads(options);
  const comm::LaunchInfo launch = comm::LaunchInfo::from_environment();
  const int per_process = options.devices_per_process;
  if (options.device_type == DeviceType::CUDA) {
    const int visible = cuda_device_count();
    if (visible == 0) {
      if (launch.rank == 0) std::cout << "ddp_step_bench: no GPU visible; nothing to measure\n";
      return 0;
    }
    TANDEM_CHECK(launch.local_size * per_process <= visible, "ddp_step_bench: ", launch.local_size,
                 " processes on this machine x ", per_process, " devices each need ", launch.local_size * per_process,
                 " GPUs but expected at most the ", visible, " visible");
  }
  std::vector<Device> devices;
  for (int i = 0; i < per_process; ++i) devices.emplace_back(options.device_type, launch.local_rank * per_process + i);
  if (!options.jsonl.empty()) check_writable(options.jsonl, "--jsonl");  // every rank fails alike, before meeting

  const std::shared_ptr<comm::ProcessGroup> group =
      comm::ProcessGroup::from_environment(devices, {.timeout = std::chrono::minutes(2)});
  std::vector<std::string> lines;
  try {
    lines = measure(options, chosen, group);
  } catch (const std::exception& error) {
    // The other ranks may be waiting in a collective this rank will never join: end the whole job now.
    group->abort(error.what());
  }
  if (group->rank() != 0) return 0;
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  std::cout << text;
  if (!options.jsonl.empty()) write_file_atomically(options.jsonl, text, "--jsonl");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& error) {
    std::cerr << error.what() << "\n";  // this program's messages name it; the library's name their function
    return 1;
  }
}

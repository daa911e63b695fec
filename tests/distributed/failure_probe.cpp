// A job in which rank 1 fails, for tests/distributed/expect_job_failure.sh. Run under mpirun with one argument:
//   throw: rank 1 throws past main while the other ranks wait in an all_reduce: the terminate handler aborts the job;
//   stall: rank 1 sleeps instead of joining the all_reduce (timeout 2 s): the others' watchdogs abort the job;
//   stall_cuda: as stall, each process on cuda:<local rank>: rank 0 waits for an NCCL all_reduce that never
//     completes, until its watchdog aborts the communicator and the job. Without a GPU for every process of this host
//     it prints "failure_probe: skipped: needs N GPUs ..." and exits 0, which expect_job_failure.sh reports as skipped.
//   stall_captured_cuda: a parallel::TrainingStep over DistributedDataParallel on cuda:<local rank>: rank 1 stops
//     calling step once its step was captured and replayed, rank 0 keeps stepping: its watchdog ends the job in the
//     processes' exchange before the next captured step (Note [Capturing across processes] in training_step.h);
//   stall_replay_cuda: both ranks capture an all_reduce of the group into a graph; rank 1 stops there, rank 0 replays
//     it and hands the replay to the watchdog (ProcessGroup::watch_replay), which ends the job when the replay's
//     collective never finishes. These two run with a 5 s timeout; the _cuda modes skip as stall_cuda does.
//   desync: every rank runs all_reduce #1 of 16 bytes; rank 1 then sleeps while the others call all_gather #2 (timeout
//     2 s): the abort message ends with the desync report, naming rank 1 and where the others wait (Note [Desync
//     reports] in comm/src/process/collective_progress.h);
//   mismatch_op: after all_reduce #1, rank 1 calls barrier #2 where the others call all_reduce #2 of 16 bytes;
//   mismatch_size: after all_reduce #1, rank 1's all_reduce #2 has 32 bytes where the others' have 16. The report
//     names the mismatch at #2 (whether the watchdog or a channel's size check ends the job).
// In throw and stall, each rank that joins the all_reduce first prints "failure_probe: rank R waits in all_reduce"
// without flushing it, which the abort must not lose. A rank that gets through prints "rank R finished normally",
// which the test treats as a failure.

#include <tandem/tandem.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace tandem;

[[noreturn]] void stop_here() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

int stall_captured(const std::shared_ptr<comm::ProcessGroup>& group) {
  const Device device = group->devices()[0];
  manual_seed(3);
  // Summed over the processes, each process's 8 rows weighted by their share of the global batch (TrainingStep's rule).
  parallel::DistributedDataParallel ddp(trainers::make_mlp(10, 20)->clone(device), group,
                                        {.reduction = comm::ReduceOp::Sum});
  parallel::ReplicatedSGD sgd(ddp.replicated(), {.lr = 0.05, .momentum = 0.9});
  parallel::TrainingStep step(ddp, sgd, nn::mse_loss);
  const Tensor x = Tensor::ones({8, 10}, device);
  const Tensor y = Tensor::ones({8, 1}, device);
  const int64_t global_rows = 8 * static_cast<int64_t>(group->size());
  for (int s = 0; s < 1000; ++s) {
    (void)step.step({.features = x, .targets = y, .global_rows = global_rows});
    if (group->rank() == 1 && step.captured()) stop_here();
  }
  group->barrier();
  std::printf("rank %d finished normally\n", group->rank());
  return 0;
}

// The desync and mismatch modes: one collective that every rank completes, then rank 1 goes out of step.
int desync(const std::shared_ptr<comm::ProcessGroup>& group, const std::string& mode) {
  const Device device = group->devices()[0];
  std::vector<Tensor> tensors = {Tensor::ones({4}, device)};
  group->all_reduce(tensors);
  const bool odd = group->rank() == 1;
  if (mode == "desync") {
    if (odd) stop_here();
    (void)group->all_gather(tensors);
  } else if (mode == "mismatch_op" && odd) {
    group->barrier();
  } else {
    std::vector<Tensor> other = {Tensor::ones({mode == "mismatch_size" && odd ? 8 : 4}, device)};
    group->all_reduce(other);
  }
  group->barrier();
  std::printf("rank %d finished normally\n", group->rank());
  return 0;
}

int stall_replay(const std::shared_ptr<comm::ProcessGroup>& group) {
  std::vector<Tensor> tensors = {Tensor::ones({4}, group->devices()[0])};
  group->all_reduce(tensors);  // connects the communicator
  DeviceGraph graph;
  graph.begin_capture(group->devices());
  group->all_reduce(tensors);
  graph.end_capture();
  if (group->rank() == 1) stop_here();
  graph.replay();
  group->watch_replay("captured training step");
  stop_here();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem;
  const std::string mode = argc == 2 ? argv[1] : "";
  const bool desyncs = mode == "desync" || mode == "mismatch_op" || mode == "mismatch_size";
  if (mode != "throw" && mode != "stall" && mode != "stall_cuda" && mode != "stall_captured_cuda" &&
      mode != "stall_replay_cuda" && !desyncs) {
    std::fprintf(stderr,
                 "usage: %s throw|stall|stall_cuda|stall_captured_cuda|stall_replay_cuda|desync|mismatch_op|"
                 "mismatch_size\n",
                 argv[0]);
    return 2;
  }
  const bool on_gpus = mode.ends_with("_cuda");
  const comm::LaunchInfo launch = comm::LaunchInfo::from_environment();
  if (on_gpus && cuda_device_count() < launch.local_size) {
    std::printf("failure_probe: skipped: needs %d GPUs (one per process of this host), %d visible\n", launch.local_size,
                cuda_device_count());
    return 0;
  }
  const Device device = on_gpus ? Device::cuda(launch.local_rank) : Device::cpu(0);
  // The captured probes' steps warm up, capture and instantiate before the stall, with some skew between the ranks:
  // they get a little more time than a bare collective.
  const bool captures = mode == "stall_captured_cuda" || mode == "stall_replay_cuda";
  auto group = comm::ProcessGroup::from_environment({device}, {.timeout = std::chrono::seconds(captures ? 5 : 2)});
  if (mode == "stall_captured_cuda") return stall_captured(group);
  if (mode == "stall_replay_cuda") return stall_replay(group);
  if (desyncs) return desync(group, mode);
  if (group->rank() == 1) {
    if (mode == "throw") throw std::runtime_error("failure_probe: rank 1 throws");
    std::this_thread::sleep_for(std::chrono::hours(1));
  }
  // Left in stdio's buffer (the test's output is a file): the abort must flush it.
  std::printf("failure_probe: rank %d waits in all_reduce\n", group->rank());
  std::vector<Tensor> tensors = {Tensor::ones({4}, device)};
  group->all_reduce(tensors);
  // On a GPU the all_reduce returns at once; the barrier waits for it first. Should the all_reduce end without rank 1
  // (its communicator aborted), the barrier still waits for rank 1, so this rank never reports a normal finish.
  group->barrier();
  std::printf("rank %d finished normally\n", group->rank());
  return 0;
}

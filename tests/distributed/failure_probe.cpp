// A job in which rank 1 fails, for tests/distributed/expect_job_failure.sh. Run under mpirun with one argument:
//   throw: rank 1 throws past main while the other ranks wait in an all_reduce: the terminate handler aborts the job;
//   stall: rank 1 sleeps instead of joining the all_reduce (timeout 2 s): the others' watchdogs abort the job;
//   stall_cuda: as stall, each process on cuda:<local rank>: rank 0 waits for an NCCL all_reduce that never
//     completes, until its watchdog aborts the communicator and the job. Without a GPU for every process of this host
//     it prints "failure_probe: skipped: needs N GPUs ..." and exits 0, which expect_job_failure.sh reports as skipped.
// A rank that gets through prints "rank R finished normally", which the test treats as a failure.

#include <tandem/tandem.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  using namespace tandem;
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "throw" && mode != "stall" && mode != "stall_cuda") {
    std::fprintf(stderr, "usage: %s throw|stall|stall_cuda\n", argv[0]);
    return 2;
  }
  const bool on_gpus = mode == "stall_cuda";
  const comm::LaunchInfo launch = comm::LaunchInfo::from_environment();
  if (on_gpus && cuda_device_count() < launch.local_size) {
    std::printf("failure_probe: skipped: needs %d GPUs (one per process of this host), %d visible\n", launch.local_size,
                cuda_device_count());
    return 0;
  }
  const Device device = on_gpus ? Device::cuda(launch.local_rank) : Device::cpu(0);
  auto group = comm::ProcessGroup::from_environment({device}, {.timeout = std::chrono::seconds(2)});
  if (group->rank() == 1) {
    if (mode == "throw") throw std::runtime_error("failure_probe: rank 1 throws");
    std::this_thread::sleep_for(std::chrono::hours(1));
  }
  std::vector<Tensor> tensors = {Tensor::ones({4}, device)};
  group->all_reduce(tensors);
  // On a GPU the all_reduce returns at once; the barrier waits for it first. Should the all_reduce end without rank 1
  // (its communicator aborted), the barrier still waits for rank 1, so this rank never reports a normal finish.
  group->barrier();
  std::printf("rank %d finished normally\n", group->rank());
  return 0;
}

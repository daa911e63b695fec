// A job in which rank 1 fails, for tests/distributed/expect_job_failure.sh. Run under mpirun with one argument:
//   throw: rank 1 throws past main while the other ranks wait in an all_reduce: the terminate handler aborts the job;
//   stall: rank 1 sleeps instead of joining the all_reduce (timeout 2 s): the others' watchdogs abort the job.
// A rank that gets through prints "rank R finished normally", which the test treats as a failure.

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include <tandem/tandem.h>

int main(int argc, char** argv) {
  using namespace tandem;
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "throw" && mode != "stall") {
    std::fprintf(stderr, "usage: %s throw|stall\n", argv[0]);
    return 2;
  }
  auto group = comm::ProcessGroup::from_environment({Device::cpu(0)}, {.timeout = std::chrono::seconds(2)});
  if (group->rank() == 1) {
    if (mode == "throw") throw std::runtime_error("failure_probe: rank 1 throws");
    std::this_thread::sleep_for(std::chrono::hours(1));
  }
  std::vector<Tensor> tensors = {Tensor::ones({4}, Device::cpu(0))};
  group->all_reduce(tensors);
  std::printf("rank %d finished normally\n", group->rank());
  return 0;
}

// Holding a GPU's compute stream on CUDA: one thread that waits on the GPU's global timer.
#include <cstdint>

#include "tandem/core/cuda/context.h"

namespace tandem::testing {
namespace {

__device__ unsigned long long global_nanoseconds() {
  unsigned long long now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

__global__ void wait_on_the_clock(unsigned long long nanoseconds) {
  const unsigned long long start = global_nanoseconds();
  while (global_nanoseconds() - start < nanoseconds) __nanosleep(10000);
}

}  // namespace

void hold_compute_stream_of(int device, int64_t nanoseconds) {
  const cuda::DeviceGuard guard(device);
  wait_on_the_clock<<<1, 1, 0, cuda::compute_stream(device)>>>(static_cast<unsigned long long>(nanoseconds));
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::testing

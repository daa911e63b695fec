// The number of visible GPUs, asked once.

#include <cuda_runtime.h>

#include "allocator.h"

namespace tandem::alloc {

int cuda_visible_devices() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no GPU: not an error for the caller, and not left for later checks
      return 0;
    }
    return n;
  }();
  return count;
}

}  // namespace tandem::alloc

// The CUDA side of warm_up (tandem/core/warm_up.h): what the first operations on a device create lazily, created now.

#include "backend.h"
#include "cuda/lt_matmul.h"
#include "cuda/peer_access.h"
#include "tandem/core/cuda/context.h"

namespace tandem::backend {

void cuda_warm_up(const std::vector<int>& devices) {
  for (int device : devices) {
    (void)cuda::compute_stream(device);  // with the communication stream
    (void)cuda::cublas_handle(device);
    cuda::create_lt_state(device);
  }
  for (size_t j = 1; j < devices.size(); ++j) {
    for (size_t i = 0; i < j; ++i) cuda::enable_peer_access_between(devices[i], devices[j]);
  }
}

}  // namespace tandem::backend

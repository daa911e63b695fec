// Holding a GPU's compute stream without CUDA: there is none (GPU tests skip before they would hold one).
#include <cstdint>

#include "tandem/core/error.h"

namespace tandem::testing {

void hold_compute_stream_of(int device, int64_t /*nanoseconds*/) {
  TANDEM_FAIL("hold_compute_stream: cuda:", device, " but tandem was built without CUDA");
}

}  // namespace tandem::testing

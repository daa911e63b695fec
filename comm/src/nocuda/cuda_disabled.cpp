// Built instead of src/cuda when tandem is configured with TANDEM_CUDA=OFF. No tensor can live on a GPU then, so
// the front end never selects this backend; it throws if it ever does.

#include "comm_backend.h"
#include "tandem/core/error.h"

namespace tandem::comm::detail {

Backend& cuda_backend() { TANDEM_FAIL("comm: tandem was built without CUDA (configure with -DTANDEM_CUDA=ON)"); }

void create_communicators(const std::vector<Device>&) {
  TANDEM_FAIL("comm::warm_up: tandem was built without CUDA (configure with -DTANDEM_CUDA=ON)");
}

}  // namespace tandem::comm::detail

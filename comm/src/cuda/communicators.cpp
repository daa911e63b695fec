#include "communicators.h"

#include "immortal_cache.h"
#include "nccl_check.h"
#include "tandem/core/error.h"

namespace tandem::comm::nccl {

void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  tandem::detail::throw_error(file, line,
                              tandem::detail::concat("comm: ", call, " failed: ", ncclGetErrorString(status), " (",
                                                     ncclGetLastError(nullptr), ")"));
}

namespace {

using Cache = detail::ImmortalCache<std::vector<int>, std::vector<ncclComm_t>>;

// Note [Communicators are never destroyed]: destroying NCCL communicators from a static destructor runs after (or
// while) the CUDA runtime tears itself down at exit, which can hang or crash; and a communicator captured into a
// CUDA graph must outlive the graph executables. So the cache is deliberately leaked and the process exit releases
// the communicators. There is one set per distinct device set, so the leak is bounded.
Cache& cache() {
  static Cache* const instance = new Cache();
  return *instance;
}

}  // namespace

// The lookup takes no lock (Note [Lock-free communicator lookup] in immortal_cache.h); ncclCommInitAll runs under
// the cache's creation mutex, once per device set.
const std::vector<ncclComm_t>& communicators(const std::vector<int>& devices) {
  return cache().get(devices, [&] {
    std::vector<ncclComm_t> comms(devices.size());
    TANDEM_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
    return comms;
  });
}

}  // namespace tandem::comm::nccl

#include "communicators.h"

#include <map>
#include <mutex>

#include "nccl_check.h"
#include "tandem/core/error.h"

namespace tandem::comm::nccl {

void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  tandem::detail::throw_error(file, line,
                              tandem::detail::concat("comm: ", call, " failed: ", ncclGetErrorString(status), " (",
                                                     ncclGetLastError(nullptr), ")"));
}

namespace {

struct Cache {
  std::mutex mutex;
  std::map<std::vector<int>, std::vector<ncclComm_t>> communicators;  // node-based: references stay valid
};

// Note [Communicators are never destroyed]: destroying NCCL communicators from a static destructor runs after (or
// while) the CUDA runtime tears itself down at exit, which can hang or crash; and a communicator captured into a
// CUDA graph must outlive the graph executables. So the cache is deliberately leaked and the process exit releases
// the communicators. There is one set per distinct device set, so the leak is bounded.
Cache& cache() {
  static Cache* const instance = new Cache();
  return *instance;
}

}  // namespace

const std::vector<ncclComm_t>& communicators(const std::vector<int>& devices) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  const auto found = c.communicators.find(devices);
  if (found != c.communicators.end()) return found->second;
  std::vector<ncclComm_t> comms(devices.size());
  TANDEM_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
  return c.communicators.emplace(devices, std::move(comms)).first->second;
}

}  // namespace tandem::comm::nccl

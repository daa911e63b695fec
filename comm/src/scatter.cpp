// comm::scatter: chunks of one tensor, one per device.

#include <algorithm>

#include "checks.h"
#include "comm_backend.h"
#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"

namespace tandem::comm {
namespace {

void check_chunk_sizes(const std::vector<int64_t>& chunk_sizes, size_t device_count, int64_t dim, int64_t size,
                       const char* fn) {
  TANDEM_CHECK(chunk_sizes.size() == device_count, fn, ": got ", chunk_sizes.size(), " chunk sizes for ",
               device_count, " devices");
  const int64_t total = checked_sum(chunk_sizes, fn, "chunk_sizes");
  TANDEM_CHECK(total == size, fn, ": chunk_sizes sum to ", total, " but dim ", dim, " has size ", size);
}

}  // namespace

namespace {

// One tensor's chunks (Tensor::chunk's or chunk_sizes' cut along `dim`): views where the device is the tensor's,
// new tensors elsewhere, whose copies from the views are added to `sources` and `copies` (their devices to
// `participants`) for the caller to issue.
std::vector<Tensor> plan_scatter(const Tensor& tensor, const std::vector<Device>& devices,
                                 const std::vector<int64_t>& chunk_sizes, int64_t dim, const char* fn,
                                 std::vector<Tensor>& sources, std::vector<Tensor>& copies,
                                 std::vector<Device>& participants) {
  detail::check_defined(tensor, fn, "tensor");
  TANDEM_CHECK(tensor.dim() > 0, fn, ": cannot scatter a 0-dim tensor");
  const int64_t d = wrap_dim(dim, tensor.dim(), fn);
  if (!chunk_sizes.empty()) check_chunk_sizes(chunk_sizes, devices.size(), d, tensor.size(d), fn);
  std::vector<Tensor> chunks = chunk_sizes.empty() ? tensor.chunk(static_cast<int64_t>(devices.size()), d)
                                                   : tensor.split(chunk_sizes, d);
  // The chunk for the source's own device stays a view; every other one becomes a new contiguous tensor.
  const auto participate = [&participants](Device device) {
    if (std::find(participants.begin(), participants.end(), device) == participants.end()) {
      participants.push_back(device);
    }
  };
  participate(tensor.device());
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (devices[i] == tensor.device()) continue;
    Tensor copy = Tensor::empty(chunks[i].shape(), tensor.dtype(), devices[i]);
    if (copy.numel() > 0) {
      sources.push_back(chunks[i]);
      copies.push_back(copy);
      participate(devices[i]);
    }
    chunks[i] = copy;
  }
  return chunks;
}

}  // namespace

std::vector<Tensor> scatter(const Tensor& tensor, const std::vector<Device>& devices,
                            const std::vector<int64_t>& chunk_sizes, int64_t dim) {
  constexpr const char* fn = "comm::scatter";
  detail::check_defined(tensor, fn, "tensor");
  detail::check_devices(devices, fn);
  NoGradGuard no_grad;
  std::vector<Tensor> sources, copies;
  std::vector<Device> participants;
  std::vector<Tensor> chunks = plan_scatter(tensor, devices, chunk_sizes, dim, fn, sources, copies, participants);
  if (!sources.empty()) detail::backend_for(participants).copy(sources, copies);
  return chunks;
}

std::vector<std::vector<Tensor>> scatter_all(const std::vector<Tensor>& tensors, const std::vector<Device>& devices) {
  constexpr const char* fn = "comm::scatter_all";
  detail::check_devices(devices, fn);
  NoGradGuard no_grad;
  std::vector<Tensor> sources, copies;
  std::vector<Device> participants;
  std::vector<std::vector<Tensor>> chunks;
  for (const Tensor& tensor : tensors) {
    chunks.push_back(plan_scatter(tensor, devices, {}, 0, fn, sources, copies, participants));
  }
  if (!sources.empty()) detail::backend_for(participants).copy(sources, copies);
  return chunks;
}

}  // namespace tandem::comm

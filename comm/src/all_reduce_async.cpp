// comm::all_reduce_async and AllReduceWork: an all-reduce that overlaps later work until it is joined.

#include <utility>

#include "checks.h"
#include "comm_backend.h"
#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"

namespace tandem::comm {

AllReduceWork all_reduce_async(std::vector<Tensor>& tensors, const std::vector<StreamMarker>& ready) {
  constexpr const char* fn = "comm::all_reduce_async";
  detail::check_one_per_device(tensors, fn, "tensor");
  TANDEM_CHECK(ready.size() == tensors.size(), fn, ": got ", ready.size(), " markers for ", tensors.size(),
               " tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    TANDEM_CHECK(tensors[i].is_contiguous(), fn, ": tensor ", i, " (strides ", to_string(tensors[i].strides()),
                 ") is not contiguous");
    TANDEM_CHECK(ready[i].device() == tensors[i].device(), fn, ": marker ", i, " is on ", ready[i].device(),
                 " but tensor ", i, " is on ", tensors[i].device());
  }
  if (tensors.size() == 1 || tensors[0].numel() == 0) return {};
  NoGradGuard no_grad;

  detail::backend_for(detail::devices_of(tensors)).start_all_reduce(tensors, ready);
  return AllReduceWork(tensors);
}

AllReduceWork::AllReduceWork(AllReduceWork&& other) noexcept : tensors_(std::exchange(other.tensors_, {})) {}

AllReduceWork& AllReduceWork::operator=(AllReduceWork&& other) {
  if (this != &other) {
    wait();
    tensors_ = std::exchange(other.tensors_, {});
  }
  return *this;
}

// Joining only enqueues event waits; should that fail, the failure is reported, not thrown (Note [No throw on free
// paths]), and a sticky CUDA error is reported again by the next call on the device.
AllReduceWork::~AllReduceWork() {
  static constinit tandem::detail::ReportOnce failures("comm::AllReduceWork: joining in the destructor");
  failures.run([this] { wait(); });
}

void AllReduceWork::wait() {
  if (tensors_.empty()) return;
  detail::backend_for(detail::devices_of(tensors_)).join(tensors_);
  tensors_.clear();
}

}  // namespace tandem::comm

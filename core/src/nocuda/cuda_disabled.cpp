// Built instead of src/cuda when tandem is configured with TANDEM_CUDA=OFF: every entry point that needs a GPU
// throws, and the device count is 0 so that CUDA tests skip.

#include "allocator.h"
#include "backend.h"
#include "tandem/core/error.h"

namespace tandem {
namespace {

[[noreturn]] void fail_without_cuda(const char* caller) {
  TANDEM_FAIL(caller, ": tandem was built without CUDA (configure with -DTANDEM_CUDA=ON)");
}

}  // namespace

namespace backend {

Backend& cuda() { fail_without_cuda("backend::cuda"); }

void cuda_copy_across_devices(const Tensor&, const Tensor&) { fail_without_cuda("backend::cuda_copy_across_devices"); }

void cuda_copy_from_pinned(const Tensor&, const Tensor&) { fail_without_cuda("backend::cuda_copy_from_pinned"); }

void cuda_fill_uniform(const Tensor&, float, float, const char*) { fail_without_cuda("backend::cuda_fill_uniform"); }

detail::DrawPlace cuda_reserve_draws(int, uint64_t, const char*) { fail_without_cuda("backend::cuda_reserve_draws"); }

bool cuda_stream_capturing(int) { fail_without_cuda("backend::cuda_stream_capturing"); }

void cuda_check_indices_on_device(const char*, const Tensor&, int64_t, int64_t, std::optional<int64_t>) {
  fail_without_cuda("backend::cuda_check_indices_on_device");
}

void cuda_raise_index_fault(int) { fail_without_cuda("backend::cuda_raise_index_fault"); }

std::shared_ptr<const detail::MarkerEvent> cuda_record_marker(int) { fail_without_cuda("backend::cuda_record_marker"); }

bool cuda_marker_done(const detail::MarkerEvent&) { fail_without_cuda("backend::cuda_marker_done"); }

void cuda_marker_synchronize(const detail::MarkerEvent&) { fail_without_cuda("backend::cuda_marker_synchronize"); }

void cuda_warm_up(const std::vector<int>&) { fail_without_cuda("backend::cuda_warm_up"); }

}  // namespace backend

namespace alloc {

void* cuda_allocate(int, size_t) { fail_without_cuda("alloc::cuda_allocate"); }

// Nothing can have been allocated without CUDA, so there is nothing to release (and, like every free path, it must
// not throw: Note [No throw on free paths]).
void cuda_free(int, void*) noexcept {}

MemoryStats cuda_stats(int) { return MemoryStats{}; }
void cuda_reset_peak(int) {}

void cuda_empty_cache(int) { fail_without_cuda("alloc::cuda_empty_cache"); }

int cuda_visible_devices() { return 0; }

void* pinned_allocate(size_t) { fail_without_cuda("alloc::pinned_allocate"); }

// Nothing can have been pinned without CUDA (and a free path must not throw).
void pinned_free(void*) noexcept {}

void pinned_record_use(void*, int) { fail_without_cuda("alloc::pinned_record_use"); }

MemoryStats pinned_stats() { return MemoryStats{}; }

}  // namespace alloc
}  // namespace tandem

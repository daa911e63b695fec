// The default implementations of Backend's entry points that a backend may override, reserve_draws (backend.h) and
// is_capturing (device_graph.h).
#include "backend.h"

#include "generator.h"
#include "raw_ops.h"
#include "tandem/core/device_graph.h"

namespace tandem {

bool is_capturing(Device device) { return device.is_cuda() && backend::cuda_stream_capturing(device.index()); }

}  // namespace tandem

namespace tandem::backend {

detail::DrawPlace reserve_draws(Device device, uint64_t count, const char* caller) {
  if (device.is_cuda()) return cuda_reserve_draws(device.index(), count, caller);
  const detail::Reservation drawn = detail::reserve(detail::current_stream(), count);
  return {.key = drawn.key, .first = drawn.first};
}

void Backend::gemm_batched(const Tensor& a, const Tensor& b, Precision precision, const Tensor& out) {
  const int64_t m = out.size(1), n = out.size(2), k = a.size(2);
  const auto matrix = [](const Tensor& t, int64_t i, int64_t rows, int64_t cols) {
    return raw::alias(t, {rows, cols}, {t.strides()[1], t.strides()[2]}, t.storage_offset() + i * t.strides()[0]);
  };
  for (int64_t i = 0; i < out.size(0); ++i) {
    gemm(matrix(a, i, m, k), matrix(b, i, k, n), {.precision = precision}, matrix(out, i, m, n));
  }
}

}  // namespace tandem::backend

// Random draws made by GPU kernels in place (backend.h's cuda_reserve_draws, cuda_fill_uniform and
// cuda_stream_capturing; Note [Random draws in captured graphs] in tandem/core/random.h).

#include <cuda_runtime.h>

#include "backend.h"
#include "cuda/captured_draws.h"
#include "cuda/uniform_fill.h"
#include "generator.h"
#include "tandem/core/cuda/context.h"

namespace tandem::backend {
namespace {

// The capture that `stream` is part of, or 0 when none is open. Errors: a capture that CUDA invalidated.
unsigned long long capture_of(cudaStream_t stream, const char* caller) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  TANDEM_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &id));
  TANDEM_CHECK(status != cudaStreamCaptureStatusInvalidated, caller,
               ": the stream's capture was invalidated by an earlier error");
  return status == cudaStreamCaptureStatusActive ? id : 0;
}

}  // namespace

detail::DrawPlace cuda_reserve_draws(int device, uint64_t count, const char* caller) {
  if (const unsigned long long capture = capture_of(cuda::compute_stream(device), caller); capture != 0) {
    const cuda::CapturedDraws::Place recorded = cuda::CapturedDraws::record(capture, device, count, caller);
    return {.words = recorded.words, .first = recorded.offset};
  }
  const detail::Reservation drawn = detail::reserve(detail::current_stream(), count);
  return {.key = drawn.key, .first = drawn.first};
}

void cuda_fill_uniform(const Tensor& out, float low, float high, const char* caller) {
  const int device = out.device().index();
  cuda::DeviceGuard guard(device);
  const detail::DrawPlace place = cuda_reserve_draws(device, static_cast<uint64_t>(out.numel()), caller);
  cuda::kernels::fill_uniform(out.mutable_data(), out.numel(), place, low, high, cuda::compute_stream(device));
}

bool cuda_stream_capturing(int device) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TANDEM_CUDA_CHECK(cudaStreamIsCapturing(cuda::compute_stream(device), &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace tandem::backend

#pragma once
// Host launchers of the CUDA backend's general kernels (elementwise.cu): every pointwise functor of kernel_ops.h
// through one generic elementwise kernel, reductions along one dimension, gather and scatter-add. Contracts as for
// the Backend methods of the same names (backend.h); each launcher returns at once on empty work and checks its
// launches.

#include <cuda_runtime.h>

#include "cuda/kernels.h"

namespace tandem::cuda::kernels {

// out = f(inputs[0..arity)) over `layout` (operand 0 the output, operands 1.. the inputs, as collapse_dims builds it).
void pointwise(const backend::PointwiseCall& call, const float* const* inputs, float* out, const Strided& layout,
               cudaStream_t stream);
// x contiguous [outer, reduce, inner], reduce >= 1; values and (may be null) indices contiguous [outer, inner].
void reduce_dim(backend::ReduceOp op, const float* x, int64_t outer, int64_t reduce, int64_t inner, float* values,
                float* indices, cudaStream_t stream);
// Over `layout` = collapse_dims(index shape, {out or src strides, index strides, x or target strides with stride 0 at
// dim}): gather reads x[base + index * dim_stride] into out; scatter_add adds src into target there (atomically).
void gather(const float* x, int64_t dim_stride, const float* index, float* out, const Strided& layout,
            cudaStream_t stream);
void scatter_add(const float* src, int64_t dim_stride, const float* index, float* target, const Strided& layout,
                 cudaStream_t stream);

}  // namespace tandem::cuda::kernels

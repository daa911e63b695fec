#pragma once
// The CPU backend's general elementwise, reduction and indexing kernels (the contracts are Backend's, backend.h).

#include <vector>

#include "backend.h"

namespace tandem::cpu {

void pointwise(const backend::PointwiseCall& call, const std::vector<Tensor>& inputs, const Tensor& out);
void reduce_dim(backend::ReduceOp op, const Tensor& x, int64_t outer, int64_t reduce, int64_t inner,
                const Tensor& values, const Tensor& indices);
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
void scatter_add(const Tensor& src, int64_t dim, const Tensor& index, const Tensor& target);

}  // namespace tandem::cpu

#pragma once
// Shapes and the small helpers every op uses to check them.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

using Shape = std::vector<int64_t>;

std::string to_string(const Shape& shape);          // "[5, 4]", "[]" for a scalar
int64_t numel_of(const Shape& shape);               // product of sizes (1 for a scalar); the shape must be valid
// The one checked size computation behind every allocation and every shape taken from a user or a file: throws
// Error naming `caller` and the shape when a size is negative or when the element count, or the byte count for
// elements of `element_size` bytes, does not fit in int64.
int64_t checked_numel(const Shape& shape, const char* caller);
size_t checked_nbytes(const Shape& shape, size_t element_size, const char* caller);
// The sum of `sizes` (split or chunk sizes), each non-negative; throws Error naming `caller` and `what` for a negative
// size or a sum that does not fit in int64.
int64_t checked_sum(const std::vector<int64_t>& sizes, const char* caller, const char* what);
Shape contiguous_strides(const Shape& shape);       // row-major strides in elements
// The strides of a dense tensor of `shape` (its elements fill numel_of(shape) places from its start) whose dims lie in
// memory in the order of `strides`: the largest stride outermost, equal strides in dim order. A new tensor in these
// strides keeps the layout of a tensor of (shape, strides), as torch.empty_like does.
Shape dense_strides_like(const Shape& shape, const Shape& strides);
// Wraps a possibly negative dimension into [0, ndim); throws Error naming `caller` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* caller);
// Note [Views of other shapes]: the strides under which the elements of (shape, strides), read in row-major order,
// are the elements of `target` (same element count) in row-major order without moving any, or nullopt when no
// strides do that (a copy is needed, as reshape makes). The source's dims fall into runs in which each dim steps
// over the whole of the next (strides[i] == strides[i + 1] * shape[i + 1]; size-1 dims join any run): such a run is
// one evenly strided line of elements, which any row-major split of it can view. So a view exists exactly when the
// target's dims, from the last, group into products that equal the runs' sizes one by one.
std::optional<Shape> view_strides(const Shape& shape, const Shape& strides, const Shape& target);
// NumPy broadcasting of two shapes; throws Error naming `caller` when they are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* caller);

}  // namespace tandem

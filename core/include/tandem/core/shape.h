#pragma once
// Shapes and the small helpers every op uses to check them.

#include <cstdint>
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
// Wraps a possibly negative dimension into [0, ndim); throws Error naming `caller` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* caller);
// NumPy broadcasting of two shapes; throws Error naming `caller` when they are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* caller);

}  // namespace tandem

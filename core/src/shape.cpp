#include "tandem/core/shape.h"

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem {

std::string to_string(const Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

int64_t numel_of(const Shape& shape) {
  int64_t count = 1;
  for (int64_t size : shape) count *= size;
  return count;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* caller) {
  TANDEM_CHECK(ndim > 0, caller, ": dimension ", dim, " is out of range for a 0-dim tensor");
  TANDEM_CHECK(dim >= -ndim && dim < ndim, caller, ": dimension ", dim, " is out of range [", -ndim, ", ",
               ndim - 1, "]");
  return dim < 0 ? dim + ndim : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* caller) {
  const size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    const int64_t sa = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    const int64_t sb = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    TANDEM_CHECK(sa == sb || sa == 1 || sb == 1, caller, ": shapes ", to_string(a), " and ", to_string(b),
                 " cannot be broadcast together");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

}  // namespace tandem

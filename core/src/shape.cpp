#include "tandem/core/shape.h"

#include <algorithm>
#include <numeric>

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

int64_t checked_numel(const Shape& shape, const char* caller) {
  int64_t count = 1;
  int64_t extent = 1;  // the product of max(size, 1): the largest contiguous stride must fit too
  bool overflow = false;
  for (int64_t size : shape) {
    TANDEM_CHECK(size >= 0, caller, ": negative size ", size, " in shape ", to_string(shape));
    overflow = overflow || __builtin_mul_overflow(extent, std::max<int64_t>(size, 1), &extent);
    if (!overflow) count *= size;  // count <= extent, so it cannot overflow while extent does not
  }
  // A zero anywhere makes the element count 0, but a shape such as [0, 2^62, 2^62] is still refused: its strides
  // would not fit in int64.
  TANDEM_CHECK(!overflow, caller, ": shape ", to_string(shape), " has more than 2^63 - 1 elements");
  return count;
}

size_t checked_nbytes(const Shape& shape, size_t element_size, const char* caller) {
  const int64_t count = checked_numel(shape, caller);
  int64_t bytes = 0;
  TANDEM_CHECK(!__builtin_mul_overflow(count, static_cast<int64_t>(element_size), &bytes), caller, ": shape ",
               to_string(shape), " (", count, " elements of ", element_size, " bytes) needs more than 2^63 - 1 bytes");
  return static_cast<size_t>(bytes);
}

int64_t checked_sum(const std::vector<int64_t>& sizes, const char* caller, const char* what) {
  int64_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    TANDEM_CHECK(sizes[i] >= 0, caller, ": ", what, "[", i, "] is ", sizes[i], " but expected >= 0");
    TANDEM_CHECK(!__builtin_add_overflow(total, sizes[i], &total), caller, ": ", what,
                 " sum to more than 2^63 - 1");
  }
  return total;
}

Shape dense_strides_like(const Shape& shape, const Shape& strides) {
  std::vector<size_t> order(shape.size());  // outermost first
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  Shape dense(shape.size());
  int64_t stride = 1;
  for (size_t i = order.size(); i-- > 0;) {
    dense[order[i]] = stride;
    stride *= std::max<int64_t>(shape[order[i]], 1);
  }
  return dense;
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

std::optional<Shape> view_strides(const Shape& shape, const Shape& strides, const Shape& target) {
  if (numel_of(shape) == 0 || shape.empty()) return contiguous_strides(target);
  Shape result(target.size());
  int64_t next = static_cast<int64_t>(target.size()) - 1;  // the last target dim not placed yet
  int64_t run_end = static_cast<int64_t>(shape.size()) - 1;
  while (run_end >= 0) {
    // The run of source dims ending at run_end: its element count and the stride of its last dim.
    const int64_t step = strides[run_end];
    int64_t run_size = shape[run_end];
    int64_t run_start = run_end;
    while (run_start > 0 && (shape[run_start - 1] == 1 || strides[run_start - 1] == run_size * step)) {
      run_size *= shape[--run_start];
    }
    // Target dims from `next` backwards cover the run exactly (size-1 target dims go with any run).
    int64_t covered = 1;
    while (next >= 0 && (covered < run_size || target[next] == 1)) {
      result[next] = covered * step;
      covered *= target[next--];
    }
    if (covered != run_size) return std::nullopt;
    run_end = run_start - 1;
  }
  if (next != -1) return std::nullopt;
  return result;
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

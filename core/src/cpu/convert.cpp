// Conversions between dtypes and fills by bit pattern on the CPU, as strided row loops.

#include "cpu/convert.h"

#include "cpu/strided_loop.h"
#include "element_convert.h"
#include "tandem/core/error.h"

namespace tandem::cpu {
namespace {

template <typename To, typename From>
void convert_typed(const Tensor& src, const Tensor& dst) {
  const From* ps = static_cast<const From*>(src.data_ptr());
  To* pd = static_cast<To*>(dst.mutable_data_ptr());
  for_each_row<2>(dst.shape(), {&dst.strides(), &src.strides()},
                  [&](int64_t length, const Offsets<2>& at, const Offsets<2>& step) {
                    for (int64_t i = 0; i < length; ++i)
                      pd[at[0] + i * step[0]] = detail::convert_element<To>(ps[at[1] + i * step[1]]);
                  });
}

template <typename T>
void fill_typed(const Tensor& out, uint64_t bits) {
  const T value = detail::element_from_bits<T>(bits);
  T* po = static_cast<T*>(out.mutable_data_ptr());
  for_each_row<1>(out.shape(), {&out.strides()}, [&](int64_t length, const Offsets<1>& at, const Offsets<1>& step) {
    for (int64_t i = 0; i < length; ++i) po[at[0] + i * step[0]] = value;
  });
}

}  // namespace

void convert(const Tensor& src, const Tensor& dst) {
  detail::with_element_type(src.dtype(), "cpu::convert", [&](auto from) {
    detail::with_element_type(dst.dtype(), "cpu::convert",
                              [&](auto to) { convert_typed<decltype(to), decltype(from)>(src, dst); });
  });
}

void fill_bits(const Tensor& out, uint64_t bits) {
  detail::with_element_type(out.dtype(), "cpu::fill_bits",
                            [&](auto element) { fill_typed<decltype(element)>(out, bits); });
}

}  // namespace tandem::cpu

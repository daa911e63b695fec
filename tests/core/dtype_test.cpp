// int64 and bfloat16 tensors: bfloat16 rounding against hand-computed bit patterns, exact int64 round trips,
// conversions with to(DType) and copy_ on every device, item<T>, typed factories and access, and the errors for
// mixing dtypes in float ops.

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::EveryDevice;

constexpr int64_t kTwoTo53 = int64_t{1} << 53;

float float_from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint16_t bf16_bits_of(uint32_t float_bits) { return BFloat16(float_from_bits(float_bits)).bits(); }

std::vector<uint16_t> bits_of(const std::vector<BFloat16>& values) {
  std::vector<uint16_t> bits;
  for (BFloat16 v : values) bits.push_back(v.bits());
  return bits;
}

// ---- BFloat16 -------------------------------------------------------------------------------------------------

TEST(BFloat16Test, RoundsToNearestEven) {
  EXPECT_EQ(bf16_bits_of(0x3F800000), 0x3F80);  // 1.0 exactly
  EXPECT_EQ(bf16_bits_of(0x3F807FFF), 0x3F80);  // just below half an ulp: down
  EXPECT_EQ(bf16_bits_of(0x3F808001), 0x3F81);  // just above half an ulp: up
  EXPECT_EQ(bf16_bits_of(0x3F808000), 0x3F80);  // a tie with an even kept part stays
  EXPECT_EQ(bf16_bits_of(0x3F818000), 0x3F82);  // a tie with an odd kept part goes up to even
  EXPECT_EQ(bf16_bits_of(0xBF818000), 0xBF82);  // the same below zero (magnitude rounds)
  EXPECT_EQ(bf16_bits_of(0x3FFFFFFF), 0x4000);  // the carry moves into the exponent: 2.0
}

TEST(BFloat16Test, InfinitiesAndOverflow) {
  EXPECT_EQ(bf16_bits_of(0x7F800000), 0x7F80);  // +inf
  EXPECT_EQ(bf16_bits_of(0xFF800000), 0xFF80);  // -inf
  EXPECT_EQ(bf16_bits_of(0x7F7F7FFF), 0x7F7F);  // rounds down to the largest finite bfloat16
  EXPECT_EQ(bf16_bits_of(0x7F7FFFFF), 0x7F80);  // FLT_MAX rounds up past it: +inf
  EXPECT_EQ(bf16_bits_of(0xFF7FFFFF), 0xFF80);
}

TEST(BFloat16Test, NaNBecomesTheQuietNaN) {
  EXPECT_EQ(bf16_bits_of(0x7FC00000), 0x7FC0);
  EXPECT_EQ(bf16_bits_of(0xFFC00000), 0x7FC0);  // the sign is not kept
  EXPECT_EQ(bf16_bits_of(0x7F800001), 0x7FC0);  // payload only in the dropped bits: still NaN, never inf
  EXPECT_EQ(bf16_bits_of(0x7FFFFFFF), 0x7FC0);  // rounding would carry out of the exponent
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16::from_bits(0x7FC0))));
}

TEST(BFloat16Test, SubnormalsAndZeros) {
  EXPECT_EQ(bf16_bits_of(0x00010000), 0x0001);  // the smallest bfloat16 subnormal
  EXPECT_EQ(bf16_bits_of(0x00008000), 0x0000);  // half of it: a tie, down to even (zero)
  EXPECT_EQ(bf16_bits_of(0x00018000), 0x0002);  // one and a half: a tie, up to even
  EXPECT_EQ(bf16_bits_of(0x00008001), 0x0001);  // just above half of it: up
  EXPECT_EQ(bf16_bits_of(0x00000001), 0x0000);  // the smallest float subnormal
  EXPECT_EQ(bf16_bits_of(0x007FFFFF), 0x0080);  // the largest float subnormal rounds up to the smallest normal
  EXPECT_EQ(bf16_bits_of(0x80000000), 0x8000);  // -0 keeps its sign
}

TEST(BFloat16Test, ConvertsToFloatExactly) {
  EXPECT_EQ(std::bit_cast<uint32_t>(static_cast<float>(BFloat16::from_bits(0x4049))), 0x40490000u);
  EXPECT_EQ(static_cast<float>(BFloat16::from_bits(0x4049)), 3.140625f);
  EXPECT_EQ(std::bit_cast<uint32_t>(static_cast<float>(BFloat16::from_bits(0x0001))), 0x00010000u);
  EXPECT_EQ(static_cast<float>(BFloat16::from_bits(0xFF80)), -std::numeric_limits<float>::infinity());
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {  // every bfloat16 converts back to itself through float
    const BFloat16 value = BFloat16::from_bits(static_cast<uint16_t>(bits));
    if (std::isnan(static_cast<float>(value))) continue;
    ASSERT_EQ(BFloat16(static_cast<float>(value)).bits(), bits);
  }
}

TEST(DTypeTest, NamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::Float32), "float32");
  EXPECT_STREQ(dtype_name(DType::Int64), "int64");
  EXPECT_STREQ(dtype_name(DType::BFloat16), "bfloat16");
  EXPECT_EQ(element_size(DType::Float32), 4u);
  EXPECT_EQ(element_size(DType::Int64), 8u);
  EXPECT_EQ(element_size(DType::BFloat16), 2u);
  EXPECT_TRUE(is_floating_point(DType::BFloat16));
  EXPECT_FALSE(is_floating_point(DType::Int64));
  EXPECT_EQ(dtype_of<int64_t>(), DType::Int64);
}

// ---- tensors of every dtype on every device --------------------------------------------------------------------

class DTypeTensorTest : public EveryDevice {};

TEST_P(DTypeTensorTest, Int64RoundTripsExactly) {
  const std::vector<int64_t> values = {kTwoTo53 + 1, -(int64_t{1} << 62) - 3, std::numeric_limits<int64_t>::max(),
                                       std::numeric_limits<int64_t>::min(), 0, -1};
  const Tensor t = Tensor::from_vector(values, {2, 3}, device());
  EXPECT_EQ(t.dtype(), DType::Int64);
  EXPECT_EQ(t.to_vector_as<int64_t>(), values);
  EXPECT_EQ(t.to(Device::cpu()).to_vector_as<int64_t>(), values);
  EXPECT_EQ(t.clone().to_vector_as<int64_t>(), values);
  EXPECT_EQ(t.t().contiguous().to_vector_as<int64_t>(),
            (std::vector<int64_t>{values[0], values[3], values[1], values[4], values[2], values[5]}));
  EXPECT_EQ(t.narrow(1, 1, 1).to_vector_as<int64_t>(), (std::vector<int64_t>{values[1], values[4]}));
  EXPECT_EQ(t.narrow(0, 0, 1).narrow(1, 0, 1).item<int64_t>(), values[0]);
}

TEST_P(DTypeTensorTest, BFloat16RoundTripsBits) {
  const std::vector<BFloat16> values = {BFloat16::from_bits(0x3F80), BFloat16::from_bits(0x7FC0),
                                        BFloat16::from_bits(0x0001), BFloat16::from_bits(0xFF80)};
  const Tensor t = Tensor::from_vector(values, {4}, device());
  EXPECT_EQ(t.dtype(), DType::BFloat16);
  EXPECT_EQ(bits_of(t.to_vector_as<BFloat16>()), (std::vector<uint16_t>{0x3F80, 0x7FC0, 0x0001, 0xFF80}));
  EXPECT_EQ(bits_of(t.to(Device::cpu()).to_vector_as<BFloat16>()), bits_of(values));
}

TEST_P(DTypeTensorTest, FloatToInt64TruncatesTowardZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_vector({2.9f, -2.9f, 0.5f, -0.5f, 16777216.0f, 1e20f, -1e20f, nan, inf, -inf}, {10},
                                       device());
  const Tensor y = x.to(DType::Int64);
  EXPECT_EQ(y.dtype(), DType::Int64);
  EXPECT_EQ(y.device(), device());
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  // Note [Conversions]: NaN gives 0, values beyond int64's range saturate, on every device.
  EXPECT_EQ(y.to_vector_as<int64_t>(), (std::vector<int64_t>{2, -2, 0, 0, 16777216, kMax, kMin, 0, kMax, kMin}));
}

TEST_P(DTypeTensorTest, FloatToBFloat16RoundsToNearestEven) {
  const std::vector<uint32_t> float_bits = {0x3F800000, 0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF,
                                            0x7F800001, 0x00018000, 0x80000000, 0xC0490FDB};
  std::vector<float> values;
  for (uint32_t bits : float_bits) values.push_back(float_from_bits(bits));
  const Tensor y = Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, device()).to(DType::BFloat16);
  EXPECT_EQ(y.dtype(), DType::BFloat16);
  // -pi is 0xC0490FDB: the dropped half 0x0FDB is below 0x8000, so it rounds down to 0xC049.
  EXPECT_EQ(bits_of(y.to_vector_as<BFloat16>()),
            (std::vector<uint16_t>{0x3F80, 0x3F80, 0x3F82, 0x3F81, 0x7F80, 0x7FC0, 0x0002, 0x8000, 0xC049}));
  // and back to float32 exactly
  const std::vector<float> back = y.to(DType::Float32).to_vector();
  EXPECT_EQ(std::bit_cast<uint32_t>(back[2]), 0x3F820000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(back[8]), 0xC0490000u);
}

TEST_P(DTypeTensorTest, Int64ToFloatRoundsToNearestEven) {
  const Tensor x = Tensor::from_vector(std::vector<int64_t>{(1 << 24) + 1, (1 << 24) + 3, kTwoTo53 + 1, -7, 257},
                                       {5}, device());
  // 2^24 + 1 lies halfway between 2^24 and 2^24 + 2: ties go to the even 2^24; 2^24 + 3 goes up to 2^24 + 4.
  EXPECT_EQ(x.to(DType::Float32).to_vector(),
            (std::vector<float>{16777216.0f, 16777220.0f, 9007199254740992.0f, -7.0f, 257.0f}));
  // 257 is a tie between the bfloat16 values 256 and 258: to even, 256 (0x4380).
  EXPECT_EQ(bits_of(x.to(DType::BFloat16).to_vector_as<BFloat16>())[4], 0x4380);
  EXPECT_EQ(x.to(DType::BFloat16).to(DType::Int64).to_vector_as<int64_t>()[3], -7);
}

// Contiguous conversions move whole aligned packs of four elements and the rest one at a time: every length and
// start offset (aligned or not) gives each element's own conversion.
TEST_P(DTypeTensorTest, ContiguousConversionsOfEveryLengthAndOffset) {
  std::vector<float> values;
  for (int i = 0; i < 24; ++i) values.push_back(static_cast<float>(i * i) * 1.0078125f - 40.5f);
  const Tensor all = Tensor::from_vector(values, {24}, device());
  const Tensor all_bf = all.to(DType::BFloat16);
  for (int64_t start = 0; start < 4; ++start) {
    for (int64_t length = 0; length + start <= 24 && length <= 17; ++length) {
      // narrow views start `start` elements into their storage: aligned only where start is 0
      const std::vector<float> back = all.narrow(0, start, length).to(DType::BFloat16).to(DType::Float32).to_vector();
      const std::vector<float> widened = all_bf.narrow(0, start, length).to(DType::Float32).to_vector();
      const std::vector<int64_t> truncated = all_bf.narrow(0, start, length).to(DType::Int64).to_vector_as<int64_t>();
      ASSERT_EQ(back.size(), static_cast<size_t>(length));
      ASSERT_EQ(widened.size(), static_cast<size_t>(length));
      for (int64_t i = 0; i < length; ++i) {
        const float expected = static_cast<float>(BFloat16(values[start + i]));
        EXPECT_EQ(back[i], expected) << "start " << start << " length " << length << " element " << i;
        EXPECT_EQ(widened[i], expected) << "start " << start << " length " << length << " element " << i;
        EXPECT_EQ(truncated[i], static_cast<int64_t>(expected)) << "start " << start << " length " << length;
      }
    }
  }
}

// Views whose last dim runs in packs of four (attention heads, [B, T, 3 C] thirds) convert, copy and add four
// elements at a time where their starts are aligned, one at a time where not: each element's own value either way.
TEST_P(DTypeTensorTest, StridedViewsInPacksOfFourGiveEachElementsValue) {
  std::vector<float> values;
  for (int i = 0; i < 2 * 5 * 24; ++i) values.push_back(static_cast<float>(i % 97) * 1.0078125f - 40.5f);
  const Tensor all = Tensor::from_vector(values, {2, 5, 24}, device());
  for (const int64_t start : {0, 1, 4, 8}) {
    SCOPED_TRACE("start " + std::to_string(start));
    // [2, 2, 5, 8]: heads of 8 taken from a third of the last dim, transposed as attention reads them
    const Tensor heads = all.narrow(2, start, 16).reshape({2, 5, 2, 8}).transpose(1, 2);
    std::vector<float> want;  // heads[b, h, t, e] = all[b, t, start + 8 h + e]
    for (int b = 0; b < 2; ++b)
      for (int h = 0; h < 2; ++h)
        for (int t = 0; t < 5; ++t)
          for (int e = 0; e < 8; ++e) want.push_back(values[(b * 5 + t) * 24 + start + 8 * h + e]);
    std::vector<float> rounded;
    for (const float v : want) rounded.push_back(static_cast<float>(BFloat16(v)));
    EXPECT_EQ(heads.contiguous().to_vector(), want);
    EXPECT_EQ(heads.to(DType::BFloat16).to(DType::Float32).to_vector(), rounded);
    std::vector<float> doubled;
    for (const float v : want) doubled.push_back(v + v);
    EXPECT_EQ((heads + heads).to_vector(), doubled);
  }
}

TEST_P(DTypeTensorTest, StridedSourcesConvert) {
  const Tensor x = Tensor::from_vector({1.5f, 2.5f, 3.5f, -4.5f, 5.5f, 6.5f}, {2, 3}, device());
  EXPECT_EQ(x.t().to(DType::Int64).to_vector_as<int64_t>(), (std::vector<int64_t>{1, -4, 2, 5, 3, 6}));
  // copy_ converts into the destination's dtype, also from a broadcast source
  Tensor labels = Tensor::zeros({2, 3}, DType::Int64, device());
  labels.copy_(Tensor::from_vector({7.9f, -8.9f, 9.1f}, {3}, device()));
  EXPECT_EQ(labels.to_vector_as<int64_t>(), (std::vector<int64_t>{7, -8, 9, 7, -8, 9}));
  // into a strided view of another dtype
  Tensor wide = Tensor::zeros({3, 2}, DType::BFloat16, device());
  wide.t().copy_(x);
  EXPECT_EQ(wide.to(DType::Float32).to_vector(), (std::vector<float>{1.5f, -4.5f, 2.5f, 5.5f, 3.5f, 6.5f}));
}

TEST_P(DTypeTensorTest, ConversionsAcrossDevices) {
  const Tensor x = Tensor::from_vector({1.25f, -3.75f}, {2}, Device::cpu());
  Tensor y = Tensor::empty({2}, DType::Int64, device());
  y.copy_(x);
  EXPECT_EQ(y.to_vector_as<int64_t>(), (std::vector<int64_t>{1, -3}));
  Tensor back = Tensor::empty({2}, DType::BFloat16, Device::cpu());
  back.copy_(Tensor::from_vector({1.25f, -3.75f}, {2}, device()));
  EXPECT_EQ(back.to(DType::Float32).to_vector(), (std::vector<float>{1.25f, -3.75f}));
  EXPECT_EQ(y.to(Device::cpu()).dtype(), DType::Int64);  // to(Device) keeps the dtype
}

TEST_P(DTypeTensorTest, TypedFactories) {
  EXPECT_EQ(Tensor::zeros({2, 2}, DType::Int64, device()).to_vector_as<int64_t>(), std::vector<int64_t>(4, 0));
  EXPECT_EQ(bits_of(Tensor::ones({3}, DType::BFloat16, device()).to_vector_as<BFloat16>()),
            std::vector<uint16_t>(3, 0x3F80));
  EXPECT_EQ(Tensor::full({2}, -2.9, DType::Int64, device()).to_vector_as<int64_t>(),
            (std::vector<int64_t>{-2, -2}));
  EXPECT_EQ(bits_of(Tensor::full({1}, 1.0 + 1.0 / 256, DType::BFloat16, device()).to_vector_as<BFloat16>()),
            std::vector<uint16_t>{0x3F80});
  EXPECT_EQ(Tensor::full({2}, 0.5f, device()).to_vector(), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(Tensor::empty({0}, DType::Int64, device()).numel(), 0);
  EXPECT_EQ(Tensor::arange(4, DType::Int64, device()).to_vector_as<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(Tensor::arange(2, 5, DType::Float32, device()).to_vector(), (std::vector<float>{2, 3, 4}));
  EXPECT_EQ(Tensor::arange(5, 2).numel(), 0);
  EXPECT_ERROR(Tensor::full({2}, std::nan(""), DType::Int64, device()),
               "Tensor::full: the value nan cannot be converted to int64 without overflow");
  EXPECT_ERROR(Tensor::full({2}, 1e300, DType::Float32, device()),
               "Tensor::full: the value 1e+300 cannot be converted to float32 without overflow");
}

TEST_P(DTypeTensorTest, FillAnyDtype) {
  Tensor t = Tensor::zeros({2, 3}, DType::Int64, device());
  t.fill_(7);
  EXPECT_EQ(t.to_vector_as<int64_t>(), std::vector<int64_t>(6, 7));
  t.narrow(1, 1, 1).zero_();  // a strided view
  EXPECT_EQ(t.to_vector_as<int64_t>(), (std::vector<int64_t>{7, 0, 7, 7, 0, 7}));
  EXPECT_ERROR(t.fill_(std::numeric_limits<double>::infinity()),
               "Tensor::fill_: the value inf cannot be converted to int64 without overflow");
}

TEST_P(DTypeTensorTest, ItemConvertsLikePyTorch) {
  const Tensor f = Tensor::scalar(-3.75f, device());
  EXPECT_EQ(f.item<int64_t>(), -3);
  EXPECT_EQ(f.item<double>(), -3.75);
  EXPECT_EQ(f.item<float>(), -3.75f);
  EXPECT_EQ(f.item(), -3.75f);
  EXPECT_EQ(f.item<BFloat16>().bits(), 0xC070);
  const Tensor big = Tensor::from_vector(std::vector<int64_t>{kTwoTo53 + 1}, {1}, device());
  EXPECT_EQ(big.item<int64_t>(), kTwoTo53 + 1);
  EXPECT_EQ(big.item<double>(), 9007199254740992.0);
  EXPECT_EQ(Tensor::from_vector(std::vector<BFloat16>{BFloat16::from_bits(0x4049)}, {}, device()).item<float>(),
            3.140625f);
  EXPECT_ERROR(Tensor::scalar(std::nanf(""), device()).item<int64_t>(),
               "Tensor::item: the value nan cannot be converted to int64 without overflow");
  EXPECT_ERROR(Tensor::scalar(1e19f, device()).item<int64_t>(), "cannot be converted to int64 without overflow");
  EXPECT_ERROR(Tensor::scalar(3.4e38f, device()).item<BFloat16>(), "cannot be converted to bfloat16 without overflow");
  EXPECT_TRUE(std::isinf(Tensor::scalar(std::numeric_limits<float>::infinity(), device()).item<BFloat16>()));
  EXPECT_ERROR(big.item(), "Tensor::item: the tensor is int64 but expected float32 (convert with .to(DType::Float32))");
}

TEST_P(DTypeTensorTest, CatAndViewsKeepTheDtype) {
  const Tensor a = Tensor::from_vector(std::vector<int64_t>{1, 2}, {2}, device());
  const Tensor b = Tensor::from_vector(std::vector<int64_t>{3}, {1}, device());
  const Tensor joined = cat({a, b});
  EXPECT_EQ(joined.dtype(), DType::Int64);
  EXPECT_EQ(joined.to_vector_as<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(joined.view({3, 1}).expand({3, 2}).contiguous().to_vector_as<int64_t>(),
            (std::vector<int64_t>{1, 1, 2, 2, 3, 3}));
  EXPECT_ERROR(cat({a, a.to(DType::Float32)}),
               "cat: got int64 and float32; expected one dtype (convert with .to(DType::Int64))");
}

TEST_P(DTypeTensorTest, FloatOpsRefuseOtherDtypes) {
  const Tensor f = Tensor::ones({2, 2}, device());
  const Tensor i = Tensor::ones({2, 2}, DType::Int64, device());
  const Tensor h = Tensor::ones({2, 2}, DType::BFloat16, device());
  EXPECT_ERROR(f + i, "add: got float32 and int64; expected one dtype (convert with .to(DType::Float32))");
  EXPECT_ERROR(i - f, "sub: got int64 and float32; expected one dtype");
  EXPECT_ERROR(i * i, "mul: got int64 but expected float32 (convert with .to(DType::Float32))");
  EXPECT_ERROR(i * 2.0f, "mul: got int64 but expected float32");
  EXPECT_ERROR(relu(h), "relu: got bfloat16 but expected float32");
  EXPECT_ERROR(tanh(i), "tanh: got int64 but expected float32");
  EXPECT_ERROR(matmul(f, h), "matmul: got float32 and bfloat16; expected one dtype");
  EXPECT_ERROR(linear(f, f, i.narrow(0, 0, 1).view({2})), "linear: got float32 and int64");
  EXPECT_ERROR(sum(i), "sum: got int64 but expected float32");
  EXPECT_ERROR(sum(i, 0), "sum: got int64 but expected float32");
  EXPECT_ERROR(mean(h), "mean: got bfloat16 but expected float32");
  EXPECT_ERROR(mse_loss(f, i), "mse_loss: got float32 and int64");
  EXPECT_ERROR(allclose(f, i), "allclose: got float32 and int64");
  Tensor target = f.clone();
  EXPECT_ERROR(target.add_(i), "Tensor::add_: got float32 and int64");
  Tensor labels = i.clone();
  EXPECT_ERROR(labels.mul_(2.0f), "Tensor::mul_: got int64 but expected float32");
  EXPECT_ERROR(total_norm({f, h}, 2.0), "total_norm: got float32 and bfloat16");
  // the raw float views of other dtypes
  EXPECT_ERROR(i.data(), "Tensor::data: the tensor is int64 but expected float32 (convert with .to(DType::Float32))");
  EXPECT_ERROR(h.mutable_data(), "Tensor::mutable_data: the tensor is bfloat16 but expected float32");
  EXPECT_ERROR(i.to_vector(), "Tensor::to_vector: the tensor is int64 but expected float32");
  EXPECT_ERROR(f.data_as<int64_t>(),
               "Tensor::data_as: the tensor is float32 but expected int64 (convert with .to(DType::Int64))");
  EXPECT_ERROR(f.to_vector_as<BFloat16>(), "Tensor::to_vector_as: the tensor is float32 but expected bfloat16");
  EXPECT_NE(i.data_as<int64_t>(), nullptr);
}

TEST_P(DTypeTensorTest, OnlyFloatingPointTensorsRequireGrad) {
  Tensor labels = Tensor::zeros({3}, DType::Int64, device());
  EXPECT_ERROR(labels.set_requires_grad(),
               "Tensor::set_requires_grad: the tensor is int64 but only floating point tensors (float32, bfloat16) "
               "can require gradients");
  labels.set_requires_grad(false);  // turning it off is fine
  EXPECT_FALSE(labels.requires_grad());
  Tensor half = Tensor::zeros({3}, DType::BFloat16, device());
  EXPECT_TRUE(half.set_requires_grad().requires_grad());
  // A conversion to int64 has no history; one to bfloat16 and back passes the gradient through.
  Tensor x = Tensor::from_vector({1.5f, -2.25f, 3.0f}, {3}, device()).set_requires_grad();
  const Tensor truncated = x.to(DType::Int64);
  EXPECT_FALSE(truncated.requires_grad());
  EXPECT_EQ(truncated.grad_fn(), nullptr);
  const Tensor round_trip = x.to(DType::BFloat16).to(DType::Float32);
  EXPECT_TRUE(round_trip.requires_grad());
  sum(round_trip * Tensor::from_vector({1.0f, 2.0f, 3.0f}, {3}, device())).backward();
  testing::expect_values(x.grad(), {1, 2, 3}, {3}, 0, 0);
  EXPECT_ERROR(x.set_grad(Tensor::zeros({3}, DType::Int64, device())),
               "Tensor::set_grad: gradient is int64 but the tensor is float32");
}

TEST_P(DTypeTensorTest, IntegerOutputsOfAFunctionKeepNoHistory) {
  // A function with a float and an int64 output (like max with indices): only the float one is differentiable.
  class ValueAndIndex final : public autograd::Function {
   public:
    std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
      return {in[0] * 2.0f, Tensor::zeros(in[0].shape(), DType::Int64, in[0].device())};
    }
    std::vector<Tensor> backward(const std::vector<Tensor>& grads) override { return {grads[0] * 2.0f}; }
    std::string name() const override { return "ValueAndIndexBackward"; }
  };
  Tensor x = Tensor::ones({2}, device()).set_requires_grad();
  const std::vector<Tensor> out = autograd::apply(std::make_shared<ValueAndIndex>(), {x});
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_FALSE(out[1].requires_grad());
  sum(out[0]).backward();
  testing::expect_values(x.grad(), {2, 2}, {2}, 0, 0);
}

TEST_P(DTypeTensorTest, PrintsTheDtype) {
  const std::string text = Tensor::from_vector(std::vector<int64_t>{kTwoTo53 + 1, -2}, {2}, device()).str();
  EXPECT_NE(text.find("[9007199254740993, -2]"), std::string::npos) << text;
  EXPECT_NE(text.find("dtype=int64"), std::string::npos) << text;
  EXPECT_NE(Tensor::ones({1}, DType::BFloat16).str().find("[1], shape=[1], device=cpu:0, dtype=bfloat16"),
            std::string::npos)
      << Tensor::ones({1}, DType::BFloat16).str();
  EXPECT_EQ(Tensor::ones({1}).str().find("dtype"), std::string::npos);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(DTypeTensorTest);

}  // namespace
}  // namespace tandem

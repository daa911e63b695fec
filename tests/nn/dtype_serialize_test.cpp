// safetensors files with int64 (I64) and bfloat16 (BF16) tensors: exact round trips, strict dtype checks of hostile
// headers, and load(module) refusing a tensor whose dtype differs from its parameter's.

#include <cstdint>
#include <limits>

#include "nn/safetensors_test_helpers.h"

namespace tandem {
namespace {

using testing::le64;
using testing::read_bytes;
using testing::safetensors_file;
using testing::ScratchDir;

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t begin,
                  uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

TEST(DTypeSerializeTest, Int64AndBFloat16RoundTripExactly) {
  ScratchDir dir;
  const std::vector<int64_t> labels = {(int64_t{1} << 53) + 1, std::numeric_limits<int64_t>::min(), -7};
  const std::vector<uint16_t> half_bits = {0x3F80, 0x7FC0, 0x0001, 0xC049};
  std::vector<BFloat16> halves;
  for (uint16_t bits : half_bits) halves.push_back(BFloat16::from_bits(bits));
  const std::string path = dir.file("mixed.safetensors");
  save_tensors({{"labels", Tensor::from_vector(labels, {3})},
                {"halves", Tensor::from_vector(halves, {2, 2})},
                {"weights", Tensor::from_vector({0.5f, -1.5f}, {2})}},
               path);
  const std::string bytes = read_bytes(path);
  EXPECT_NE(bytes.find(R"("labels":{"dtype":"I64","shape":[3],"data_offsets":[0,24]})"), std::string::npos) << bytes;
  EXPECT_NE(bytes.find(R"("halves":{"dtype":"BF16","shape":[2,2],"data_offsets":[24,32]})"), std::string::npos);

  const TensorFile file = load_tensors(path);
  ASSERT_EQ(file.tensors.size(), 3u);
  std::map<std::string, Tensor> by_name(file.tensors.begin(), file.tensors.end());
  EXPECT_EQ(by_name["labels"].dtype(), DType::Int64);
  EXPECT_EQ(by_name["labels"].to_vector_as<int64_t>(), labels);
  EXPECT_EQ(by_name["halves"].dtype(), DType::BFloat16);
  EXPECT_EQ(by_name["halves"].shape(), (Shape{2, 2}));
  std::vector<uint16_t> loaded_bits;
  for (BFloat16 v : by_name["halves"].to_vector_as<BFloat16>()) loaded_bits.push_back(v.bits());
  EXPECT_EQ(loaded_bits, half_bits);
  EXPECT_EQ(by_name["weights"].to_vector(), (std::vector<float>{0.5f, -1.5f}));
}

TEST(DTypeSerializeTest, SavesFromEveryDeviceAndStrides) {
  ScratchDir dir;
  const std::string path = dir.file("strided.safetensors");
  const Tensor grid = Tensor::arange(6).view({2, 3});
  save_tensors({{"grid_t", grid.t()}}, path);
  EXPECT_EQ(load_tensors(path).tensors[0].second.to_vector_as<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

TEST(DTypeSerializeTest, HostileDtypeHeadersAreRefused) {
  const std::string eight_bytes(8, '\0');
  // An I64 tensor of two elements needs 16 bytes, a BF16 one of two needs 4.
  EXPECT_ERROR(load_tensors_from_bytes(safetensors_file("{" + entry("a", "I64", "[2]", 0, 8) + "}", eight_bytes)),
               "tensor 'a' has data_offsets [0, 8] (8 bytes) but its shape [2] needs 16 bytes");
  EXPECT_ERROR(load_tensors_from_bytes(safetensors_file("{" + entry("a", "BF16", "[2]", 0, 8) + "}", eight_bytes)),
               "tensor 'a' has data_offsets [0, 8] (8 bytes) but its shape [2] needs 4 bytes");
  EXPECT_ERROR(load_tensors_from_bytes(safetensors_file("{" + entry("a", "I32", "[2]", 0, 8) + "}", eight_bytes)),
               "tensor 'a' has dtype 'I32', but only F32, I64 and BF16 are supported");
  EXPECT_ERROR(load_tensors_from_bytes(safetensors_file("{" + entry("a", "i64", "[1]", 0, 8) + "}", eight_bytes)),
               "tensor 'a' has dtype 'i64', which is not a safetensors dtype");
  EXPECT_ERROR(load_tensors_from_bytes(safetensors_file("{" + entry("a", "BF16\\u0000", "[4]", 0, 8) + "}",
                                                        eight_bytes)),
               "which is not a safetensors dtype");
  // Shapes whose byte count overflows at 8 bytes per element.
  EXPECT_ERROR(load_tensors_from_bytes(safetensors_file(
                   "{" + entry("a", "I64", "[1152921504606846976,16]", 0, 8) + "}", eight_bytes)),
               "tensor 'a'");
  // A well-formed one loads.
  const TensorFile file =
      load_tensors_from_bytes(safetensors_file("{" + entry("a", "BF16", "[4]", 0, 8) + "}", eight_bytes));
  EXPECT_EQ(file.tensors[0].second.dtype(), DType::BFloat16);
}

TEST(DTypeSerializeTest, LoadRefusesAParameterOfAnotherDtype) {
  ScratchDir dir;
  nn::Linear layer(2, 1);
  const std::string path = dir.file("wrong_dtype.safetensors");
  save_tensors({{"weight", Tensor::zeros({1, 2}, DType::Int64)}, {"bias", Tensor::zeros({1})}}, path);
  const std::vector<float> before = layer.weight.to_vector();
  EXPECT_ERROR(load(layer, path), "load: 'weight' is int64 in the file but float32 in the module");
  EXPECT_EQ(layer.weight.to_vector(), before);  // nothing written
  save_tensors({{"weight", Tensor::zeros({1, 2})}, {"bias", Tensor::zeros({1}, DType::BFloat16)}}, path);
  EXPECT_ERROR(load(layer, path), "load: 'bias' is bfloat16 in the file but float32 in the module");
}

}  // namespace
}  // namespace tandem

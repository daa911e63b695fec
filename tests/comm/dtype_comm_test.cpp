// comm with int64 and bfloat16 tensors: the copies (broadcast, broadcast_coalesced, scatter, gather) keep dtype and
// bits on every device set; the reductions refuse every dtype but float32.

#include <cstdint>
#include <limits>

#include "comm/comm_test_helpers.h"

namespace tandem {
namespace {

using testing::EveryDeviceSet;

constexpr int64_t kBig = (int64_t{1} << 53) + 1;  // not a float, not a double

Tensor labels(int64_t n, Device device) {
  std::vector<int64_t> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = kBig * (i % 2 == 0 ? 1 : -1) + i;
  return Tensor::from_vector(values, {n}, device);
}

class DTypeCommTest : public EveryDeviceSet {};

TEST_P(DTypeCommTest, BroadcastKeepsDtypeAndBits) {
  const std::vector<Device> devs = devices();
  const Tensor source = labels(5, devs[0]);
  const std::vector<Tensor> copies = comm::broadcast(source, devs);
  ASSERT_EQ(copies.size(), devs.size());
  for (size_t d = 0; d < devs.size(); ++d) {
    EXPECT_EQ(copies[d].device(), devs[d]);
    EXPECT_EQ(copies[d].dtype(), DType::Int64);
    EXPECT_EQ(copies[d].to_vector_as<int64_t>(), source.to_vector_as<int64_t>());
  }
}

TEST_P(DTypeCommTest, BroadcastCoalescedMixesDtypes) {
  const std::vector<Device> devs = devices();
  const Tensor weights = testing::iota({3, 2}, devs[0], 0.5f);
  const Tensor ids = labels(4, devs[0]);
  const Tensor halves = Tensor::from_vector(std::vector<BFloat16>{BFloat16::from_bits(0x7FC0),
                                                                   BFloat16::from_bits(0x0001)}, {2}, devs[0]);
  const auto copies = comm::broadcast_coalesced({weights, ids, halves}, devs, /*buffer_size=*/32);
  for (size_t d = 0; d < devs.size(); ++d) {
    testing::expect_close(copies[d][0], weights, 0, 0);
    EXPECT_EQ(copies[d][1].to_vector_as<int64_t>(), ids.to_vector_as<int64_t>());
    const std::vector<BFloat16> bits = copies[d][2].to_vector_as<BFloat16>();
    EXPECT_EQ(bits[0].bits(), 0x7FC0);
    EXPECT_EQ(bits[1].bits(), 0x0001);
  }
}

TEST_P(DTypeCommTest, ScatterAndGatherKeepDtypeAndBits) {
  const std::vector<Device> devs = devices();
  const Tensor source = labels(7, devs[0]).view({7, 1});
  const std::vector<Tensor> chunks = comm::scatter(source, devs);
  std::vector<int64_t> seen;
  for (size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].dtype(), DType::Int64);
    EXPECT_EQ(chunks[i].device(), devs[i]);
    for (int64_t v : chunks[i].to_vector_as<int64_t>()) seen.push_back(v);
  }
  EXPECT_EQ(seen, source.to_vector_as<int64_t>());
  const Tensor gathered = comm::gather(chunks, 0, devs.back());
  EXPECT_EQ(gathered.dtype(), DType::Int64);
  EXPECT_EQ(gathered.device(), devs.back());
  EXPECT_EQ(gathered.to_vector_as<int64_t>(), source.to_vector_as<int64_t>());

  const Tensor halves = Tensor::ones({4, 2}, DType::BFloat16, devs[0]);
  const Tensor round_trip = comm::gather(comm::scatter(halves, devs));
  EXPECT_EQ(round_trip.dtype(), DType::BFloat16);
  EXPECT_EQ(round_trip.to(DType::Float32).to_vector(), std::vector<float>(8, 1.0f));
}

TEST_P(DTypeCommTest, GatherRefusesMixedDtypes) {
  const std::vector<Device> devs = devices();
  EXPECT_ERROR(comm::gather({Tensor::zeros({1}, devs[0]), Tensor::zeros({1}, DType::Int64, devs[1])}),
               "comm::gather: tensor 1 is int64 but expected float32 (the dtype of tensor 0)");
}

TEST_P(DTypeCommTest, ReductionsSumFloat32Only) {
  const std::vector<Device> devs = devices();
  std::vector<Tensor> ids;
  for (const Device& device : devs) ids.push_back(Tensor::ones({3}, DType::Int64, device));
  EXPECT_ERROR(comm::reduce_add(ids),
               "comm::reduce_add: input 0 is int64 but expected float32 (comm sums float32 tensors; convert with "
               ".to(DType::Float32))");
  EXPECT_ERROR(comm::all_reduce(ids), "comm::all_reduce: tensor 0 is int64 but expected float32");
  std::vector<Tensor> mixed;
  for (const Device& device : devs) mixed.push_back(Tensor::ones({3}, device));
  mixed.back() = Tensor::ones({3}, DType::BFloat16, devs.back());
  EXPECT_ERROR(comm::reduce_add(mixed), "comm::reduce_add: input " + std::to_string(devs.size() - 1) +
                                            " is bfloat16 but expected float32");
  std::vector<std::vector<Tensor>> lists;
  for (const Device& device : devs) lists.push_back({Tensor::ones({2}, device), Tensor::ones({2}, DType::Int64, device)});
  EXPECT_ERROR(comm::reduce_add_coalesced(lists),
               "comm::reduce_add_coalesced: tensor 1 of list 0 is int64 but expected float32");
  EXPECT_ERROR(comm::all_reduce_async(ids, {}), "comm::all_reduce_async: tensor 0 is int64 but expected float32");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(DTypeCommTest);

}  // namespace
}  // namespace tandem

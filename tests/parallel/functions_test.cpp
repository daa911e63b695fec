// Broadcast <-> ReduceAddCoalesced and Scatter <-> Gather: values forward, each other's gradients backward.

#include "parallel/parallel_test_helpers.h"

namespace tandem::testing {
namespace {

using parallel::Broadcast;
using parallel::ReduceAddCoalesced;

class ParallelFunctions : public EveryDeviceSet {};

// Row r of a [rows, cols] tensor filled with the value `row_values[r]`, as a flat reference.
std::vector<double> rows_of(const std::vector<double>& row_values, int64_t cols) {
  std::vector<double> values;
  for (double v : row_values)
    for (int64_t c = 0; c < cols; ++c) values.push_back(v);
  return values;
}

TEST_P(ParallelFunctions, ScatterChunksFollowChunkRulesAndBackwardGathersTheChunkGradients) {
  const auto devices = this->devices();
  Tensor x = seeded_randn({5, 3}, devices[0], 1).set_requires_grad();
  const std::vector<Tensor> chunks = parallel::scatter(x, devices);
  const std::vector<int64_t> expected_rows = devices.size() == 2 ? std::vector<int64_t>{3, 2}
                                                                 : std::vector<int64_t>{2, 2, 1};
  ASSERT_EQ(chunks.size(), expected_rows.size());
  std::vector<Tensor> losses;
  std::vector<double> expected_grad_rows;
  int64_t row = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].device(), devices[i]);
    EXPECT_EQ(chunks[i].shape(), (Shape{expected_rows[i], 3}));
    EXPECT_FALSE(chunks[i].is_leaf());
    expect_close(chunks[i], x.narrow(0, row, expected_rows[i]), 0.0, 0.0);
    losses.push_back(sum(chunks[i]) * static_cast<float>(i + 1));
    for (int64_t r = 0; r < expected_rows[i]; ++r) expected_grad_rows.push_back(static_cast<double>(i + 1));
    row += expected_rows[i];
  }
  autograd::backward(losses);
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().device(), devices[0]);
  expect_values(x.grad(), rows_of(expected_grad_rows, 3), {5, 3});
}

TEST_P(ParallelFunctions, ScatterCountsChunksWithoutGradientAsZero) {
  const auto devices = this->devices();
  Tensor x = seeded_randn({4, 2}, devices[0], 2).set_requires_grad();
  const std::vector<Tensor> chunks = parallel::scatter(x, devices);  // 2 + 2 rows on both sets
  ASSERT_EQ(chunks.size(), 2u);
  sum(chunks[1] * 3.0f).backward();  // only the second chunk takes part in the loss
  expect_values(x.grad(), {0, 0, 0, 0, 3, 3, 3, 3}, {4, 2});
}

TEST_P(ParallelFunctions, ScatterOfFewerRowsThanDevicesGivesFewerChunks) {
  const auto devices = this->devices();
  Tensor x = Tensor::from_vector({1, 2, 3}, {1, 3}, devices[0]).set_requires_grad();
  const std::vector<Tensor> chunks = parallel::scatter(x, devices);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].device(), devices[0]);
  sum(chunks[0] * chunks[0]).backward();
  expect_values(x.grad(), {2, 4, 6}, {1, 3});
}

TEST_P(ParallelFunctions, ScatterWithChunkSizesAlongTheLastDim) {
  const auto devices = this->devices();
  std::vector<int64_t> sizes(devices.size(), 0);
  sizes.front() = 1;
  sizes.back() = 4;  // with three devices the middle chunk is empty
  Tensor x = Tensor::from_vector({0, 1, 2, 3, 4, 10, 11, 12, 13, 14}, {2, 5}, devices[0]).set_requires_grad();
  const std::vector<Tensor> chunks = parallel::scatter(x, devices, sizes, -1);
  ASSERT_EQ(chunks.size(), devices.size());
  expect_values(chunks.front(), {0, 10}, {2, 1});
  expect_values(chunks.back(), {1, 2, 3, 4, 11, 12, 13, 14}, {2, 4});
  if (devices.size() == 3) EXPECT_EQ(chunks[1].shape(), (Shape{2, 0}));
  EXPECT_EQ(chunks.back().device(), devices.back());
  std::vector<Tensor> losses;
  for (size_t i = 0; i < chunks.size(); ++i) losses.push_back(sum(chunks[i]) * static_cast<float>(i + 1));
  autograd::backward(losses);
  const double last = static_cast<double>(devices.size());
  expect_values(x.grad(), {1, last, last, last, last, 1, last, last, last, last}, {2, 5});
}

TEST_P(ParallelFunctions, GatherConcatenatesAndBackwardScattersTheGradientToEachInputDevice) {
  const auto devices = this->devices();
  const std::vector<int64_t> rows = {2, 3, 1};
  std::vector<Tensor> parts;
  for (size_t i = 0; i < devices.size(); ++i)
    parts.push_back(seeded_randn({rows[i], 2}, devices[i], 10 + i).set_requires_grad());
  const Device destination = devices.back();
  Tensor gathered = parallel::gather(parts, destination);
  EXPECT_EQ(gathered.device(), destination);
  EXPECT_FALSE(gathered.is_leaf());
  int64_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    expect_close(gathered.narrow(0, total, rows[i]), parts[i], 0.0, 0.0);
    total += rows[i];
  }
  std::vector<float> weights(static_cast<size_t>(total * 2));
  for (size_t k = 0; k < weights.size(); ++k) weights[k] = static_cast<float>(k);
  sum(gathered * Tensor::from_vector(weights, {total, 2}, destination)).backward();
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    ASSERT_TRUE(parts[i].grad().defined());
    EXPECT_EQ(parts[i].grad().device(), devices[i]);
    std::vector<double> expected(weights.begin() + offset * 2, weights.begin() + (offset + rows[i]) * 2);
    expect_values(parts[i].grad(), expected, {rows[i], 2});
    offset += rows[i];
  }
}

TEST_P(ParallelFunctions, GatherAlongDimOneOfInputsOnOneDevice) {
  const auto devices = this->devices();
  Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, devices[1]).set_requires_grad();
  Tensor b = Tensor::from_vector({5, 6}, {2, 1}, devices[1]).set_requires_grad();
  Tensor gathered = parallel::gather({a, b}, devices[0], 1);
  expect_values(gathered, {1, 2, 5, 3, 4, 6}, {2, 3});
  sum(gathered * Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, devices[0])).backward();
  expect_values(a.grad(), {1, 2, 4, 5}, {2, 2});
  expect_values(b.grad(), {3, 6}, {2, 1});
}

TEST_P(ParallelFunctions, ScatterThenGatherPassesAGradientCheck) {
  const auto devices = this->devices();
  gradcheck(
      [&](const std::vector<Tensor>& in) {
        std::vector<Tensor> chunks = parallel::scatter(in[0], devices);
        for (Tensor& chunk : chunks) chunk = tanh(chunk) * chunk;
        return parallel::gather(chunks, devices[0]);
      },
      {seeded_randn({5, 2}, devices[0], 3).set_requires_grad()});
}

TEST_P(ParallelFunctions, BroadcastAliasesTheSourceAndSumsGradientsBack) {
  const auto devices = this->devices();
  Tensor p = seeded_randn({3, 2}, devices[0], 4).set_requires_grad();
  Tensor q = seeded_randn({4}, devices[0], 5).set_requires_grad();
  const std::vector<Tensor> copies = autograd::apply(std::make_shared<Broadcast>(devices), {p, q});
  ASSERT_EQ(copies.size(), 2 * devices.size());
  EXPECT_TRUE(copies[0].shares_storage_with(p));
  EXPECT_FALSE(copies[0].is_same(p));
  EXPECT_FALSE(copies[0].is_leaf());
  std::vector<Tensor> losses;
  for (size_t d = 0; d < devices.size(); ++d) {
    EXPECT_EQ(copies[2 * d].device(), devices[d]);
    EXPECT_EQ(copies[2 * d + 1].device(), devices[d]);
    if (d > 0) EXPECT_FALSE(copies[2 * d].shares_storage_with(p));
    expect_close(copies[2 * d], p, 0.0, 0.0);
    expect_close(copies[2 * d + 1], q, 0.0, 0.0);
    losses.push_back(sum(copies[2 * d]) * static_cast<float>(d + 1) + sum(copies[2 * d + 1] * copies[2 * d + 1]));
  }
  autograd::backward(losses);
  const double n = static_cast<double>(devices.size());
  expect_values(p.grad(), std::vector<double>(6, n * (n + 1) / 2), {3, 2});
  std::vector<double> expected_q;
  for (double v : to_double(q)) expected_q.push_back(2 * n * v);
  expect_values(q.grad(), expected_q, {4});
}

TEST_P(ParallelFunctions, BroadcastFromADeviceThatIsNotListed) {
  const auto devices = this->devices();
  Tensor p = seeded_randn({2, 2}, devices[0], 6).set_requires_grad();
  const std::vector<Device> targets(devices.begin() + 1, devices.end());
  const std::vector<Tensor> copies = autograd::apply(std::make_shared<Broadcast>(targets), {p});
  ASSERT_EQ(copies.size(), targets.size());
  std::vector<Tensor> losses;
  for (size_t d = 0; d < targets.size(); ++d) {
    EXPECT_EQ(copies[d].device(), targets[d]);
    EXPECT_FALSE(copies[d].shares_storage_with(p));
    losses.push_back(sum(copies[d]));
  }
  autograd::backward(losses);
  EXPECT_EQ(p.grad().device(), devices[0]);
  expect_values(p.grad(), std::vector<double>(4, static_cast<double>(targets.size())), {2, 2});
}

TEST_P(ParallelFunctions, ReduceAddCoalescedSumsAndItsBackwardBroadcasts) {
  const auto devices = this->devices();
  std::vector<Tensor> inputs;  // two tensors per device, device-major
  for (size_t d = 0; d < devices.size(); ++d) {
    inputs.push_back(seeded_randn({2, 3}, devices[d], 20 + d).set_requires_grad());
    inputs.push_back(seeded_randn({5}, devices[d], 30 + d).set_requires_grad());
  }
  const Device destination = devices.back();
  const std::vector<Tensor> sums =
      autograd::apply(std::make_shared<ReduceAddCoalesced>(destination, 2), inputs);
  ASSERT_EQ(sums.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    std::vector<double> expected(static_cast<size_t>(sums[i].numel()), 0.0);
    for (size_t d = 0; d < devices.size(); ++d) {
      const std::vector<double> values = to_double(inputs[2 * d + i]);
      for (size_t k = 0; k < expected.size(); ++k) expected[k] += values[k];
    }
    EXPECT_EQ(sums[i].device(), destination);
    expect_values(sums[i], expected, inputs[i].shape());
  }
  sum(sums[0] * 2.0f).backward();
  for (size_t d = 0; d < devices.size(); ++d) {
    EXPECT_EQ(inputs[2 * d].grad().device(), devices[d]);
    expect_values(inputs[2 * d].grad(), std::vector<double>(6, 2.0), {2, 3});
    expect_values(inputs[2 * d + 1].grad(), std::vector<double>(5, 0.0), {5});  // zero: not in the loss
  }
}

TEST_P(ParallelFunctions, DocumentedErrors) {
  const auto devices = this->devices();
  EXPECT_ERROR(Broadcast({devices[0], devices[1], devices[0]}),
               "parallel::Broadcast: device " + devices[0].str() + " appears twice (entries 0 and 2)");
  EXPECT_ERROR(Broadcast(std::vector<Device>{}), "parallel::Broadcast: got no devices");
  const Tensor a = Tensor::zeros({2}, devices[0]);
  const Tensor b = Tensor::zeros({2}, devices[1]);
  EXPECT_ERROR(Broadcast(devices).forward({a, b}), "input 1 is on " + devices[1].str());
  EXPECT_ERROR(ReduceAddCoalesced(devices[0], 0), "group_size is 0");
  EXPECT_ERROR(ReduceAddCoalesced(devices[0], 2).forward({a, b, a}),
               "got 3 inputs but expected a positive multiple of 2");
  EXPECT_ERROR(ReduceAddCoalesced(devices[0], 1).forward({a, a}), "comm::reduce_add_coalesced");
  EXPECT_ERROR(parallel::scatter(Tensor::zeros({6, 2}, devices[0]), {devices[0], devices[1]}, {1, 1, 4}),
               "got 3 chunk sizes for 2 devices");
  EXPECT_ERROR(parallel::scatter(Tensor(), devices), "parallel::scatter: input is undefined");
  EXPECT_ERROR(parallel::gather({}, devices[0]), "comm::gather");
  EXPECT_ERROR(parallel::gather({a, Tensor()}, devices[0]), "parallel::gather: tensor 1 is undefined");
  EXPECT_ERROR(parallel::gather({Tensor::zeros({2, 4}, devices[0]), Tensor::zeros({2, 5}, devices[1])}, devices[0]),
               "tensor 1 has shape [2, 5] but expected [*, 4]");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(ParallelFunctions);

}  // namespace
}  // namespace tandem::testing

// TensorDataLoader against closed forms: DataLoader's permutations, every row once per epoch, drop_last counts, the
// sharding hook's and the sampler's picks, exact int64 and bfloat16 rows, and device chunks equal to the host rows.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <vector>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

// Row r: features (r, 100 + r) in float32, the label r * 2^40 + r in int64 (no float holds it), and the weight r / 2
// in bfloat16 (exact for r < 512): each row tells which data row it is, in every dtype.
TensorDataset numbered(int64_t rows) {
  std::vector<float> features;
  std::vector<int64_t> labels;
  std::vector<float> weights;
  for (int64_t r = 0; r < rows; ++r) {
    features.push_back(static_cast<float>(r));
    features.push_back(100.0f + static_cast<float>(r));
    labels.push_back((r << 40) + r);
    weights.push_back(0.5f * static_cast<float>(r));
  }
  return TensorDataset({Tensor::from_vector(features, {rows, 2}), Tensor::from_vector(labels, {rows}),
                        Tensor::from_vector(weights, {rows}).to(DType::BFloat16)});
}

// The data rows a part of a batch holds (on any device), checked to agree in all three tensors.
std::vector<int64_t> rows_in(const std::vector<Tensor>& part) {
  EXPECT_EQ(part.size(), 3u);
  const std::vector<float> features = part[0].to(Device::cpu()).to_vector();
  const std::vector<int64_t> labels = part[1].to(Device::cpu()).to_vector_as<int64_t>();
  const std::vector<float> weights = part[2].to(Device::cpu()).to(DType::Float32).to_vector();
  EXPECT_EQ(part[1].dtype(), DType::Int64);
  EXPECT_EQ(part[2].dtype(), DType::BFloat16);
  std::vector<int64_t> rows;
  for (size_t i = 0; i < labels.size(); ++i) {
    const auto r = static_cast<int64_t>(features[2 * i]);
    EXPECT_EQ(features[2 * i + 1], 100.0f + static_cast<float>(r));
    EXPECT_EQ(labels[i], (r << 40) + r);
    EXPECT_EQ(weights[i], 0.5f * static_cast<float>(r));
    rows.push_back(r);
  }
  return rows;
}

std::vector<int64_t> rows_in(const TensorBatch& batch) {
  std::vector<int64_t> rows;
  for (const std::vector<Tensor>& part : batch.parts) {
    const std::vector<int64_t> more = rows_in(part);
    rows.insert(rows.end(), more.begin(), more.end());
  }
  return rows;
}

// One epoch through the range interface.
std::vector<int64_t> epoch_rows(TensorDataLoader& loader) {
  std::vector<int64_t> rows;
  for (const TensorBatch& batch : loader) {
    const std::vector<int64_t> more = rows_in(batch);
    rows.insert(rows.end(), more.begin(), more.end());
  }
  return rows;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> values(static_cast<size_t>(n));
  std::iota(values.begin(), values.end(), 0);
  return values;
}

std::vector<int64_t> sorted(std::vector<int64_t> values) {
  std::sort(values.begin(), values.end());
  return values;
}

TEST(TensorDataLoader, EveryRowOncePerEpochInDataLoadersPermutations) {
  const TensorDataset data = numbered(10);
  TableDataset same_rows{{"x"}, "y", std::vector<double>(10), std::vector<double>(10)};
  DataLoader reference(same_rows, 4, /*shuffle=*/true, 7);
  TensorDataLoader loader(data, {.batch_size = 4, .shuffle = true, .seed = 7});
  EXPECT_EQ(loader.num_batches(), 3);
  std::vector<std::vector<int64_t>> epochs;
  for (int epoch = 0; epoch < 3; ++epoch) {
    reference.begin_epoch();
    epochs.push_back(epoch_rows(loader));
    EXPECT_EQ(epochs.back(), reference.order());  // the batches in order are the epoch's permutation
    EXPECT_EQ(loader.order(), reference.order());
    EXPECT_EQ(sorted(epochs.back()), iota(10));
  }
  EXPECT_EQ(loader.epoch(), 3);
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_NE(epochs[0], iota(10));

  TensorDataLoader same_seed(data, {.batch_size = 3, .shuffle = true, .seed = 7});
  EXPECT_EQ(epoch_rows(same_seed), epochs[0]);  // the batch size does not change the order
  TensorDataLoader other_seed(data, {.batch_size = 4, .shuffle = true, .seed = 8});
  EXPECT_NE(epoch_rows(other_seed), epochs[0]);
  TensorDataLoader unshuffled(data, {.batch_size = 4});
  EXPECT_EQ(epoch_rows(unshuffled), iota(10));
  EXPECT_EQ(epoch_rows(unshuffled), iota(10));
}

TEST(TensorDataLoader, BatchesHoldTheirRowsAndTheRestoredStateRepeatsEpochs) {
  TensorDataLoader loader(numbered(10), {.batch_size = 4, .shuffle = true, .seed = 3});
  loader.begin_epoch();
  const std::vector<int64_t> order = loader.order();
  const TensorBatch last = loader.batch(2);
  EXPECT_EQ(last.global_rows, 2);
  EXPECT_EQ(last.rows(), 2);
  EXPECT_EQ(last.device_rows, (std::vector<int64_t>{2}));
  ASSERT_EQ(last.parts.size(), 1u);
  EXPECT_EQ(last.tensors()[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(last.tensors()[1].shape(), (Shape{2}));
  EXPECT_EQ(last.tensors()[0].device(), Device::cpu());
  EXPECT_EQ(rows_in(last), (std::vector<int64_t>{order[8], order[9]}));

  const uint64_t state = loader.shuffle_state();
  const std::vector<int64_t> second = epoch_rows(loader);
  const std::vector<int64_t> third = epoch_rows(loader);
  TensorDataLoader resumed(numbered(10), {.batch_size = 4, .shuffle = true, .seed = 3});
  resumed.set_shuffle_state(state);
  EXPECT_EQ(epoch_rows(resumed), second);
  EXPECT_EQ(epoch_rows(resumed), third);
}

TEST(TensorDataLoader, DropLastDropsOnlyTheShortBatch) {
  const TensorDataset data = numbered(10);
  const struct {
    int64_t batch_size;
    int64_t kept;
    int64_t dropped;
  } cases[] = {{1, 10, 10}, {3, 4, 3}, {4, 3, 2}, {5, 2, 2}, {9, 2, 1}, {10, 1, 1}};
  for (const auto& c : cases) {
    TensorDataLoader kept(data, {.batch_size = c.batch_size, .shuffle = true, .seed = 1});
    TensorDataLoader dropped(data, {.batch_size = c.batch_size, .shuffle = true, .seed = 1, .drop_last = true});
    EXPECT_EQ(kept.num_batches(), c.kept) << c.batch_size;
    EXPECT_EQ(dropped.num_batches(), c.dropped) << c.batch_size;
    const std::vector<int64_t> all = epoch_rows(kept);
    const std::vector<int64_t> full = epoch_rows(dropped);
    EXPECT_EQ(full.size(), static_cast<size_t>(c.dropped * c.batch_size));
    EXPECT_EQ(full, std::vector<int64_t>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(full.size())));
  }
  EXPECT_ERROR(TensorDataLoader(data, {.batch_size = 11, .drop_last = true}),
               "TensorDataLoader: drop_last with 10 rows and batch_size 11 leaves no batch; expected a batch_size of "
               "at most 10 or drop_last false");
}

TEST(TensorDataLoader, TheShardHookPicksThisProcesssRows) {
  std::vector<int64_t> epochs_seen;
  // PyTorch's DistributedSampler for rank 1 of 2: every second row of the epoch's order, from the second.
  const auto rank_one = [&](int64_t epoch, std::vector<int64_t> order) {
    epochs_seen.push_back(epoch);
    std::vector<int64_t> mine;
    for (size_t i = 1; i < order.size(); i += 2) mine.push_back(order[i]);
    return mine;
  };
  TensorDataLoader loader(numbered(10), {.batch_size = 2, .shuffle = true, .seed = 5, .shard = rank_one});
  EXPECT_EQ(loader.num_batches(), 0);  // nothing picked before the first epoch
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    loader.begin_epoch();
    const std::vector<int64_t>& order = loader.order();
    const std::vector<int64_t> expected = {order[1], order[3], order[5], order[7], order[9]};
    EXPECT_EQ(loader.indices(), expected);
    EXPECT_EQ(loader.num_batches(), 3);  // 5 rows in batches of 2
    std::vector<int64_t> rows;
    for (int64_t b = 0; b < loader.num_batches(); ++b) {
      const TensorBatch batch = loader.batch(b);
      EXPECT_EQ(batch.global_rows, b < 2 ? 2 : 1);  // this process's rows: there is no global batch
      const std::vector<int64_t> more = rows_in(batch);
      rows.insert(rows.end(), more.begin(), more.end());
    }
    EXPECT_EQ(rows, expected);
  }
  EXPECT_EQ(epochs_seen, (std::vector<int64_t>{0, 1}));

  loader.set_epoch(7);
  loader.begin_epoch();
  EXPECT_EQ(epochs_seen.back(), 7);
  EXPECT_EQ(loader.epoch(), 8);

  TensorDataLoader dropping(numbered(10), {.batch_size = 2, .drop_last = true, .shard = rank_one});
  dropping.begin_epoch();
  EXPECT_EQ(dropping.num_batches(), 2);
  EXPECT_EQ(epoch_rows(dropping), (std::vector<int64_t>{1, 3, 5, 7}));  // begin() starts the next epoch
}

TEST(TensorDataLoader, BadShardHooksAreErrors) {
  const auto too_far = [](int64_t, std::vector<int64_t> order) {
    order.push_back(10);
    return order;
  };
  TensorDataLoader loader(numbered(10), {.batch_size = 4, .shard = too_far});
  EXPECT_ERROR(loader.begin_epoch(),
               "TensorDataLoader::begin_epoch: the shard hook gave row 10 at position 10 for epoch 0 but the data set "
               "has 10 rows");
  const auto three = [](int64_t, std::vector<int64_t> order) {
    return std::vector<int64_t>(order.begin(), order.begin() + 3);
  };
  TensorDataLoader short_of_a_batch(numbered(10), {.batch_size = 4, .drop_last = true, .shard = three});
  EXPECT_ERROR(short_of_a_batch.begin_epoch(),
               "TensorDataLoader::begin_epoch: the shard hook's rows of epoch 0: drop_last with 3 rows and batch_size "
               "4 leaves no batch");
  EXPECT_ERROR(TensorDataLoader(numbered(10), {.sampler = DistributedSampler(2, 1, 0), .shard = three}),
               "TensorDataLoader: options.shard and a DistributedSampler of 2 processes with 1 devices each were both "
               "given; expected one of them");
  EXPECT_ERROR(loader.set_epoch(-1), "TensorDataLoader::set_epoch: epoch is -1 but expected >= 0");
}

TEST(TensorDataLoader, DevicesGetTheScatterChunksOfEachBatch) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1), Device::cpu(2)};
  TensorDataLoader host(numbered(9), {.batch_size = 7, .shuffle = true, .seed = 2});
  TensorDataLoader scattered(numbered(9), {.batch_size = 7, .shuffle = true, .seed = 2, .devices = devices});
  host.begin_epoch();
  scattered.begin_epoch();
  for (int64_t b = 0; b < 2; ++b) {
    const TensorBatch whole = host.batch(b);
    const TensorBatch parts = scattered.batch(b);
    // comm::scatter's rule: 7 rows over 3 devices are chunks of 3, 3, 1; the last batch's 2 rows two chunks of 1.
    const std::vector<int64_t> expected_rows = b == 0 ? std::vector<int64_t>{3, 3, 1} : std::vector<int64_t>{1, 1};
    EXPECT_EQ(parts.device_rows, expected_rows);
    ASSERT_EQ(parts.parts.size(), expected_rows.size());
    EXPECT_EQ(parts.global_rows, whole.global_rows);
    for (size_t t = 0; t < 3; ++t) {
      const std::vector<Tensor> chunks = comm::scatter(whole.tensors()[t], devices);
      ASSERT_EQ(chunks.size(), parts.parts.size());
      for (size_t d = 0; d < chunks.size(); ++d) {
        EXPECT_EQ(parts.parts[d][t].device(), devices[d]);
        EXPECT_EQ(parts.parts[d][t].shape(), chunks[d].shape());
        EXPECT_EQ(parts.parts[d][t].to(DType::Float32).to_vector(), chunks[d].to(DType::Float32).to_vector());
      }
    }
    EXPECT_EQ(rows_in(parts), rows_in(whole));
  }
  EXPECT_ERROR(scattered.batch(0).tensors(), "TensorBatch::tensors: the batch has 3 parts");
}

TEST(TensorDataLoader, TheSamplerGivesEachProcessItsRunOfTheGlobalBatch) {
  // Two processes of two devices each see, device by device, the chunks one process of four devices sees.
  const std::vector<Device> four = {Device::cpu(0), Device::cpu(1), Device::cpu(2), Device::cpu(3)};
  TensorDataLoader whole(numbered(26), {.batch_size = 13, .shuffle = true, .seed = 4, .devices = four});
  whole.begin_epoch();
  for (int64_t rank = 0; rank < 2; ++rank) {
    TensorDataLoader mine(numbered(26), {.batch_size = 13,
                                         .shuffle = true,
                                         .seed = 4,
                                         .devices = {Device::cpu(0), Device::cpu(1)},
                                         .sampler = DistributedSampler(2, 2, rank)});
    mine.begin_epoch();
    ASSERT_EQ(mine.num_batches(), 2);
    for (int64_t b = 0; b < 2; ++b) {
      const TensorBatch all = whole.batch(b);
      const TensorBatch part = mine.batch(b);
      EXPECT_EQ(part.global_rows, 13);
      // 13 rows over 4 devices: chunks of 4, 4, 4, 1, so rank 0 holds 4 + 4 rows and rank 1 holds 4 + 1.
      EXPECT_EQ(part.device_rows, rank == 0 ? (std::vector<int64_t>{4, 4}) : (std::vector<int64_t>{4, 1}));
      for (size_t d = 0; d < part.parts.size(); ++d) {
        EXPECT_EQ(rows_in(part.parts[d]), rows_in(all.parts[static_cast<size_t>(rank) * 2 + d]));
      }
    }
  }
  TensorDataLoader host_only(numbered(26), {.batch_size = 13, .sampler = DistributedSampler(2, 2, 1)});
  host_only.begin_epoch();
  const TensorBatch shard = host_only.batch(0);
  EXPECT_EQ(shard.parts.size(), 1u);  // without devices, this process's rows on the host
  EXPECT_EQ(rows_in(shard), (std::vector<int64_t>{8, 9, 10, 11, 12}));
  EXPECT_ERROR(TensorDataLoader(numbered(26), {.devices = four, .sampler = DistributedSampler(2, 2, 0)}),
               "TensorDataLoader: the sampler has 2 devices per process but options.devices lists 4; expected as many");
}

TEST(TensorDataLoader, PinMemoryIsIgnoredOnCpuDevicesAndPinsHostBatchesWithAGpu) {
  TensorDataLoader to_cpus(numbered(6), {.batch_size = 4, .pin_memory = true, .devices = {Device::cpu(1)}});
  to_cpus.begin_epoch();
  for (const Tensor& tensor : to_cpus.batch(0).tensors()) {  // moved out of the temporary batch
    EXPECT_FALSE(tensor.is_pinned());
    EXPECT_EQ(tensor.device(), Device::cpu(1));
  }
  TensorDataLoader on_host(numbered(6), {.batch_size = 4, .pin_memory = true});
  on_host.begin_epoch();
  const TensorBatch batch = on_host.batch(0);
  for (const Tensor& tensor : batch.tensors()) EXPECT_EQ(tensor.is_pinned(), cuda_device_count() > 0);
  EXPECT_EQ(rows_in(batch), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(TensorDataLoader, BadOptionsAreErrors) {
  const TensorDataset data = numbered(5);
  EXPECT_ERROR(TensorDataLoader(data, {.batch_size = 0}), "TensorDataLoader: batch_size is 0 but expected at least 1");
  EXPECT_ERROR(TensorDataLoader(data, {.devices = {Device::cpu(0), Device::cpu(1), Device::cpu(0)}}),
               "TensorDataLoader: device cpu:0 appears twice (options.devices entries 0 and 2) but expected distinct");
  EXPECT_ERROR(TensorDataLoader(data, {.devices = {Device::cuda(cuda_device_count())}}),
               "TensorDataLoader: device cuda:");
  TensorDataLoader loader(data, {.batch_size = 2});
  loader.begin_epoch();
  EXPECT_ERROR(loader.batch(3), "TensorDataLoader::batch: index 3 but the epoch has 3 batches");
  EXPECT_ERROR(loader.batch(-1), "TensorDataLoader::batch: index -1 but the epoch has 3 batches");
}

TEST(TensorDataLoaderCUDA, DeviceChunksEqualTheHostRows) {
  TANDEM_REQUIRE_GPUS(1);
  std::vector<Device> gpus;
  for (int d = 0; d < cuda_device_count(); ++d) gpus.push_back(Device::cuda(d));
  for (const bool pin_memory : {true, false}) {
    TensorDataLoader host(numbered(200), {.batch_size = 24, .shuffle = true, .seed = 9});
    TensorDataLoader loader(numbered(200),
                            {.batch_size = 24, .shuffle = true, .seed = 9, .pin_memory = pin_memory, .devices = gpus});
    for (int epoch = 0; epoch < 2; ++epoch) {
      host.begin_epoch();
      loader.begin_epoch();
      // The ring of staging buffers comes round while earlier copies still wait behind the hold.
      tandem::testing::hold_compute_stream(gpus.front(), std::chrono::milliseconds(100));
      std::vector<TensorBatch> batches;
      for (int64_t b = 0; b < loader.num_batches(); ++b) batches.push_back(loader.batch(b));
      ASSERT_EQ(batches.size(), 9u);  // 200 rows in batches of 24: 8 full ones and one of 8
      for (int64_t b = 0; b < loader.num_batches(); ++b) {
        const TensorBatch& batch = batches[static_cast<size_t>(b)];
        for (size_t d = 0; d < batch.parts.size(); ++d) {
          for (const Tensor& tensor : batch.parts[d]) EXPECT_EQ(tensor.device(), gpus[d]);
        }
        EXPECT_EQ(rows_in(batch), rows_in(host.batch(b))) << "pin_memory " << pin_memory << ", batch " << b;
      }
    }
  }
}

}  // namespace
}  // namespace tandem::trainers

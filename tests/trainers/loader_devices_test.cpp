// DataLoader over tensors against closed forms: the permutations of any Dataset, every row once per epoch, drop_last
// counts, the sampler's picks, exact int64 and bfloat16 rows, and device chunks equal to the host rows, pinned or not,
// for any number of workers.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <vector>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

// Row r: data (r, 100 + r) in float32 and the target r * 2^40 + r in int64 (no float holds it): each row tells which
// data row it is, in both tensors.
TensorDataset numbered(int64_t rows) {
  std::vector<float> features;
  std::vector<int64_t> labels;
  for (int64_t r = 0; r < rows; ++r) {
    features.push_back(static_cast<float>(r));
    features.push_back(100.0f + static_cast<float>(r));
    labels.push_back((r << 40) + r);
  }
  return TensorDataset({Tensor::from_vector(features, {rows, 2}), Tensor::from_vector(labels, {rows})});
}

// The data rows a chunk holds (on any device), checked to agree in both tensors.
std::vector<int64_t> rows_in(const Tensor& data, const Tensor& target) {
  const std::vector<float> features = data.to(Device::cpu()).to_vector();
  const std::vector<int64_t> labels = target.to(Device::cpu()).to_vector_as<int64_t>();
  EXPECT_EQ(target.dtype(), DType::Int64);
  EXPECT_EQ(features.size(), 2 * labels.size());
  std::vector<int64_t> rows;
  for (size_t i = 0; i < labels.size(); ++i) {
    const auto r = static_cast<int64_t>(features[2 * i]);
    EXPECT_EQ(features[2 * i + 1], 100.0f + static_cast<float>(r));
    EXPECT_EQ(labels[i], (r << 40) + r);
    rows.push_back(r);
  }
  return rows;
}

std::vector<int64_t> rows_in(const Batch& batch) {
  if (batch.inputs.empty()) return rows_in(batch.features, batch.targets);
  std::vector<int64_t> rows;
  for (size_t d = 0; d < batch.inputs.size(); ++d) {
    const std::vector<int64_t> more = rows_in(batch.inputs[d], batch.labels[d]);
    rows.insert(rows.end(), more.begin(), more.end());
  }
  return rows;
}

// One epoch through the range interface.
std::vector<int64_t> epoch_rows(DataLoader& loader) {
  std::vector<int64_t> rows;
  for (const Batch& batch : loader) {
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

TEST(LoaderOverTensors, EveryRowOncePerEpochInTheSamePermutationsAsATable) {
  const TensorDataset data = numbered(10);
  TableDataset same_rows{{"x"}, "y", std::vector<double>(10), std::vector<double>(10)};
  DataLoader reference(same_rows, 4, /*shuffle=*/true, 7);
  DataLoader loader(data, {.batch_size = 4, .shuffle = true, .seed = 7});
  EXPECT_EQ(loader.num_batches(), 3);
  std::vector<std::vector<int64_t>> epochs;
  for (int epoch = 0; epoch < 3; ++epoch) {
    reference.begin_epoch();
    epochs.push_back(epoch_rows(loader));
    EXPECT_EQ(epochs.back(), reference.order());  // the batches in order are the epoch's permutation
    EXPECT_EQ(loader.order(), reference.order());
    EXPECT_EQ(sorted(epochs.back()), iota(10));
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_NE(epochs[0], iota(10));

  DataLoader same_seed(data, {.batch_size = 3, .shuffle = true, .seed = 7});
  EXPECT_EQ(epoch_rows(same_seed), epochs[0]);  // the batch size does not change the order
  DataLoader other_seed(data, {.batch_size = 4, .shuffle = true, .seed = 8});
  EXPECT_NE(epoch_rows(other_seed), epochs[0]);
  DataLoader unshuffled(data, {.batch_size = 4});
  EXPECT_EQ(epoch_rows(unshuffled), iota(10));
  EXPECT_EQ(epoch_rows(unshuffled), iota(10));
}

TEST(LoaderOverTensors, BatchesHoldTheirRowsAndTheRestoredStateRepeatsEpochs) {
  const TensorDataset data = numbered(10);
  DataLoader loader(data, {.batch_size = 4, .shuffle = true, .seed = 3});
  loader.begin_epoch();
  const std::vector<int64_t> order = loader.order();
  const Batch last = loader.batch(2);
  EXPECT_EQ(last.global_rows, 2);
  EXPECT_EQ(last.rows(), 2);
  EXPECT_EQ(last.device_rows, (std::vector<int64_t>{2}));
  EXPECT_TRUE(last.inputs.empty());
  EXPECT_EQ(last.features.shape(), (Shape{2, 2}));
  EXPECT_EQ(last.targets.shape(), (Shape{2}));
  EXPECT_EQ(last.features.device(), Device::cpu());
  EXPECT_EQ(rows_in(last), (std::vector<int64_t>{order[8], order[9]}));

  const uint64_t state = loader.shuffle_state();
  const std::vector<int64_t> second = epoch_rows(loader);
  const std::vector<int64_t> third = epoch_rows(loader);
  DataLoader resumed(data, {.batch_size = 4, .shuffle = true, .seed = 3});
  resumed.set_shuffle_state(state);
  EXPECT_EQ(epoch_rows(resumed), second);
  EXPECT_EQ(epoch_rows(resumed), third);
}

TEST(LoaderOverTensors, DropLastDropsOnlyTheShortBatch) {
  const TensorDataset data = numbered(10);
  const struct {
    int64_t batch_size;
    int64_t kept;
    int64_t dropped;
  } cases[] = {{1, 10, 10}, {3, 4, 3}, {4, 3, 2}, {5, 2, 2}, {9, 2, 1}, {10, 1, 1}};
  for (const auto& c : cases) {
    DataLoader kept(data, {.batch_size = c.batch_size, .shuffle = true, .seed = 1});
    DataLoader dropped(data, {.batch_size = c.batch_size, .shuffle = true, .seed = 1, .drop_last = true});
    EXPECT_EQ(kept.num_batches(), c.kept) << c.batch_size;
    EXPECT_EQ(dropped.num_batches(), c.dropped) << c.batch_size;
    const std::vector<int64_t> all = epoch_rows(kept);
    const std::vector<int64_t> full = epoch_rows(dropped);
    EXPECT_EQ(full.size(), static_cast<size_t>(c.dropped * c.batch_size));
    EXPECT_EQ(full, std::vector<int64_t>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(full.size())));
  }
  EXPECT_ERROR(DataLoader(data, {.batch_size = 11, .drop_last = true}),
               "DataLoader: drop_last with 10 rows and batch_size 11 leaves no batch; expected a batch_size of at "
               "most 10 or drop_last false");
}

TEST(LoaderOverTensors, BatchReadsEqualTheStackedExamplesInEveryDtype) {
  // The overrides of get_batch give what the default (collate of get) gives, bit for bit.
  const std::vector<int64_t> picks = {7, 0, 7, 3};
  const TensorDataset tensors = numbered(8);
  const Example fast = tensors.get_batch(picks);
  const Example slow = tensors.Dataset::get_batch(picks);
  EXPECT_EQ(fast.data.to_vector(), slow.data.to_vector());
  EXPECT_EQ(fast.target.to_vector_as<int64_t>(), slow.target.to_vector_as<int64_t>());
  EXPECT_EQ(fast.target.shape(), (Shape{4}));

  // bfloat16 rows: r / 2, exact for the rows here.
  std::vector<float> halves;
  for (int r = 0; r < 8; ++r) halves.push_back(0.5f * static_cast<float>(r));
  const TensorDataset weights({Tensor::from_vector(halves, {8, 1}).to(DType::BFloat16), Tensor::arange(8)});
  const Example bf16 = weights.get_batch(picks);
  EXPECT_EQ(bf16.data.dtype(), DType::BFloat16);
  EXPECT_EQ(bf16.data.to(DType::Float32).to_vector(), (std::vector<float>{3.5f, 0.0f, 3.5f, 1.5f}));

  const TableDataset table{{"a", "b"}, "y", {0.1, 0.2, 1.1, 1.2, 2.1, 2.2}, {10.0, 11.0, 12.0}};
  const Example rows = table.get_batch({2, 0});
  const Example stacked = table.Dataset::get_batch({2, 0});
  EXPECT_EQ(rows.data.shape(), (Shape{2, 2}));
  EXPECT_EQ(rows.target.shape(), (Shape{2, 1}));
  EXPECT_EQ(rows.data.to_vector(), stacked.data.to_vector());
  EXPECT_EQ(rows.target.to_vector(), (std::vector<float>{12.0f, 10.0f}));

  EXPECT_ERROR(tensors.get_batch({8}), "TensorDataset::get_batch: index 8 but the data set has 8 rows");
  EXPECT_ERROR(table.get_batch({-1}), "TableDataset::get_batch: index -1 but the data set has 3 rows");
  EXPECT_ERROR(table.get_batch({}), "TableDataset::get_batch: got no indices");
  const TensorDataset three({Tensor::zeros({2, 1}), Tensor::zeros({2}), Tensor::zeros({2})});
  EXPECT_ERROR(three.get_batch({0}), "TensorDataset::get_batch: the data set holds 3 tensors but an Example takes two");
}

TEST(LoaderOverTensors, DevicesGetTheScatterChunksOfEachBatchForAnyNumberOfWorkers) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1), Device::cpu(2)};
  const TensorDataset data = numbered(9);
  for (const int workers : {0, 2}) {
    DataLoader host(data, {.batch_size = 7, .shuffle = true, .seed = 2});
    DataLoader scattered(data,
                         {.batch_size = 7, .shuffle = true, .seed = 2, .num_workers = workers, .devices = devices});
    host.begin_epoch();
    scattered.begin_epoch();
    for (int64_t b = 0; b < 2; ++b) {
      const Batch whole = host.batch(b);
      const Batch parts = scattered.batch(b);
      // comm::scatter's rule: 7 rows over 3 devices are chunks of 3, 3, 1; the last batch's 2 rows two chunks of 1.
      const std::vector<int64_t> expected_rows = b == 0 ? std::vector<int64_t>{3, 3, 1} : std::vector<int64_t>{1, 1};
      EXPECT_EQ(parts.device_rows, expected_rows);
      ASSERT_EQ(parts.inputs.size(), expected_rows.size());
      ASSERT_EQ(parts.labels.size(), expected_rows.size());
      EXPECT_FALSE(parts.features.defined());
      EXPECT_EQ(parts.global_rows, whole.global_rows);
      const std::vector<Tensor> data_chunks = comm::scatter(whole.features, devices);
      const std::vector<Tensor> target_chunks = comm::scatter(whole.targets, devices);
      ASSERT_EQ(data_chunks.size(), parts.inputs.size());
      for (size_t d = 0; d < data_chunks.size(); ++d) {
        EXPECT_EQ(parts.inputs[d].device(), devices[d]);
        EXPECT_EQ(parts.labels[d].device(), devices[d]);
        EXPECT_EQ(parts.inputs[d].to_vector(), data_chunks[d].to_vector());
        EXPECT_EQ(parts.labels[d].to_vector_as<int64_t>(), target_chunks[d].to_vector_as<int64_t>());
      }
      EXPECT_EQ(rows_in(parts), rows_in(whole));
    }
  }
}

TEST(LoaderOverTensors, TheSamplerGivesEachProcessItsRunOfTheGlobalBatch) {
  // Two processes of two devices each see, device by device, the chunks one process of four devices sees.
  const std::vector<Device> four = {Device::cpu(0), Device::cpu(1), Device::cpu(2), Device::cpu(3)};
  const TensorDataset data = numbered(26);
  DataLoader whole(data, {.batch_size = 13, .shuffle = true, .seed = 4, .devices = four});
  whole.begin_epoch();
  for (int64_t rank = 0; rank < 2; ++rank) {
    DataLoader mine(data, {.batch_size = 13,
                           .shuffle = true,
                           .seed = 4,
                           .devices = {Device::cpu(0), Device::cpu(1)},
                           .sampler = DistributedSampler(2, 2, rank)});
    mine.begin_epoch();
    ASSERT_EQ(mine.num_batches(), 2);
    for (int64_t b = 0; b < 2; ++b) {
      const Batch all = whole.batch(b);
      const Batch part = mine.batch(b);
      EXPECT_EQ(part.global_rows, 13);
      // 13 rows over 4 devices: chunks of 4, 4, 4, 1, so rank 0 holds 4 + 4 rows and rank 1 holds 4 + 1.
      EXPECT_EQ(part.device_rows, rank == 0 ? (std::vector<int64_t>{4, 4}) : (std::vector<int64_t>{4, 1}));
      for (size_t d = 0; d < part.inputs.size(); ++d) {
        const size_t global = static_cast<size_t>(rank) * 2 + d;
        EXPECT_EQ(rows_in(part.inputs[d], part.labels[d]), rows_in(all.inputs[global], all.labels[global]));
      }
    }
  }
  DataLoader host_only(data, {.batch_size = 13, .sampler = DistributedSampler(2, 2, 1)});
  host_only.begin_epoch();
  const Batch shard = host_only.batch(0);
  EXPECT_TRUE(shard.inputs.empty());  // without devices, this process's rows on the host
  EXPECT_EQ(rows_in(shard), (std::vector<int64_t>{8, 9, 10, 11, 12}));
  EXPECT_ERROR(DataLoader(data, {.devices = four, .sampler = DistributedSampler(2, 2, 0)}),
               "DataLoader: the sampler has 2 devices per process but options.devices lists 4; expected as many");
}

TEST(LoaderOverTensors, PinMemoryIsIgnoredOnCpuDevicesAndPinsHostBatchesWithAGpu) {
  const TensorDataset data = numbered(6);
  DataLoader to_cpus(data, {.batch_size = 4, .pin_memory = true, .devices = {Device::cpu(1)}});
  to_cpus.begin_epoch();
  const Batch placed = to_cpus.batch(0);
  for (const Tensor& tensor : {placed.inputs.at(0), placed.labels.at(0)}) {
    EXPECT_FALSE(tensor.is_pinned());
    EXPECT_EQ(tensor.device(), Device::cpu(1));
  }
  DataLoader on_host(data, {.batch_size = 4, .pin_memory = true});
  on_host.begin_epoch();
  const Batch batch = on_host.batch(0);
  EXPECT_EQ(batch.features.is_pinned(), cuda_device_count() > 0);
  EXPECT_EQ(batch.targets.is_pinned(), cuda_device_count() > 0);
  EXPECT_EQ(rows_in(batch), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(LoaderOverTensors, BadDevicesAreErrors) {
  const TensorDataset data = numbered(5);
  EXPECT_ERROR(DataLoader(data, {.devices = {Device::cpu(0), Device::cpu(1), Device::cpu(0)}}),
               "DataLoader: device cpu:0 appears twice (options.devices entries 0 and 2) but expected distinct");
  EXPECT_ERROR(DataLoader(data, {.devices = {Device::cuda(cuda_device_count())}}), "DataLoader: device cuda:");
  DataLoader loader(data, {.batch_size = 2});
  loader.begin_epoch();
  EXPECT_ERROR(loader.batch(3), "DataLoader::batch: index 3 but an epoch has 3 batches");
  EXPECT_ERROR(loader.batch(-1), "DataLoader::batch: index -1 but an epoch has 3 batches");
}

TEST(LoaderOverTensorsCUDA, DeviceChunksEqualTheHostRowsPinnedOrNotWithOrWithoutWorkers) {
  TANDEM_REQUIRE_GPUS(1);
  std::vector<Device> gpus;
  for (int d = 0; d < cuda_device_count(); ++d) gpus.push_back(Device::cuda(d));
  const TensorDataset data = numbered(200);
  for (const bool pin_memory : {true, false}) {
    for (const int workers : {0, 3}) {
      DataLoader host(data, {.batch_size = 24, .shuffle = true, .seed = 9});
      DataLoader loader(data, {.batch_size = 24,
                               .shuffle = true,
                               .seed = 9,
                               .num_workers = workers,
                               .pin_memory = pin_memory,
                               .devices = gpus});
      for (int epoch = 0; epoch < 2; ++epoch) {
        host.begin_epoch();
        loader.begin_epoch();
        // Pinned blocks come round while earlier copies still wait behind the hold (Note [Pinned block reuse]).
        tandem::testing::hold_compute_stream(gpus.front(), std::chrono::milliseconds(100));
        std::vector<Batch> batches;
        for (int64_t b = 0; b < loader.num_batches(); ++b) batches.push_back(loader.batch(b));
        ASSERT_EQ(batches.size(), 9u);  // 200 rows in batches of 24: 8 full ones and one of 8
        for (int64_t b = 0; b < loader.num_batches(); ++b) {
          const Batch& batch = batches[static_cast<size_t>(b)];
          for (size_t d = 0; d < batch.inputs.size(); ++d) {
            EXPECT_EQ(batch.inputs[d].device(), gpus[d]);
            EXPECT_EQ(batch.labels[d].device(), gpus[d]);
          }
          EXPECT_EQ(rows_in(batch), rows_in(host.batch(b)))
              << "pin_memory " << pin_memory << ", workers " << workers << ", batch " << b;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tandem::trainers

// DistributedSampler: N processes with M devices each see, device by device, the rows one process with N * M devices
// sees when it scatters each batch with comm::scatter (Tensor::chunk's rules).
#include <algorithm>
#include <string>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

// Row r has the single feature r, so every batch row tells which data row it is.
TableDataset rows_and_negatives(int64_t rows) {
  TableDataset data{{"r"}, "y", {}, {}};
  for (int64_t r = 0; r < rows; ++r) {
    data.features.push_back(static_cast<double>(r));
    data.targets.push_back(static_cast<double>(-r));
  }
  return data;
}

std::vector<Device> cpu_devices(int64_t count) {
  std::vector<Device> devices;
  for (int64_t i = 0; i < count; ++i) devices.push_back(Device::cpu(static_cast<int>(i)));
  return devices;
}

// The data rows of each chunk, in order.
std::vector<std::vector<float>> rows_of(const std::vector<Tensor>& chunks) {
  std::vector<std::vector<float>> rows;
  for (const Tensor& chunk : chunks) rows.push_back(chunk.to_vector());
  return rows;
}

struct Layout {
  int64_t rows, batch, processes, devices;
};

std::string describe(const Layout& layout) {
  return std::to_string(layout.rows) + " rows, batch " + std::to_string(layout.batch) + ", " +
         std::to_string(layout.processes) + " processes x " + std::to_string(layout.devices) + " devices";
}

// For every batch of an epoch: the single process's scatter over processes * devices devices, cut into the
// processes' consecutive runs of devices, equals what each process's loader gives and splits by device_rows.
void expect_same_rows_as_one_process(const Layout& layout) {
  SCOPED_TRACE(describe(layout));
  const TableDataset data = rows_and_negatives(layout.rows);
  const int64_t world = layout.processes * layout.devices;
  DataLoader single(data, layout.batch, /*shuffle=*/true, /*seed=*/5);
  single.begin_epoch();
  std::vector<DataLoader> ranks;
  for (int64_t rank = 0; rank < layout.processes; ++rank) {
    ranks.emplace_back(data, layout.batch, true, 5, DistributedSampler(layout.processes, layout.devices, rank));
    ranks.back().begin_epoch();
    ASSERT_EQ(ranks.back().num_batches(), single.num_batches());
  }
  for (int64_t b = 0; b < single.num_batches(); ++b) {
    const Batch whole = single.batch(b);
    const std::vector<std::vector<float>> expected = rows_of(comm::scatter(whole.features, cpu_devices(world)));
    size_t next_chunk = 0;
    for (int64_t rank = 0; rank < layout.processes; ++rank) {
      SCOPED_TRACE("batch " + std::to_string(b) + ", rank " + std::to_string(rank));
      const Batch part = ranks[rank].batch(b);
      EXPECT_EQ(part.global_rows, whole.features.size(0));
      EXPECT_LE(static_cast<int64_t>(part.device_rows.size()), layout.devices);
      EXPECT_EQ(part.features.size(0), part.targets.size(0));
      int64_t rows = 0;
      for (int64_t n : part.device_rows) {
        EXPECT_GE(n, 1);
        rows += n;
      }
      ASSERT_EQ(part.features.size(0), rows);
      const std::vector<Tensor> chunks = rows == 0 ? std::vector<Tensor>{} : part.features.split(part.device_rows, 0);
      for (const std::vector<float>& chunk : rows_of(chunks)) {
        ASSERT_LT(next_chunk, expected.size());
        EXPECT_EQ(chunk, expected[next_chunk]);
        ++next_chunk;
      }
    }
    EXPECT_EQ(next_chunk, expected.size());  // every chunk of the single process went to exactly one rank
  }
}

TEST(DistributedSampler, EveryDeviceSeesTheRowsOfTheSingleProcessScatter) {
  for (int64_t rows : {1, 2, 5, 13, 64, 100}) {
    for (int64_t batch : {1, 3, 4, 7, 13, 64}) {
      for (int64_t processes : {1, 2, 3, 4}) {
        for (int64_t devices : {1, 2, 3}) expect_same_rows_as_one_process({rows, batch, processes, devices});
      }
    }
  }
}

TEST(DistributedSampler, TheLastBatchLeavesLaterRanksWithoutRows) {
  // 10 rows in batches of 4: the last batch has 2 rows; over 2 processes x 2 devices, chunks of 1 row each go to
  // global devices 0 and 1, both on rank 0, and rank 1 has none.
  EXPECT_EQ(DistributedSampler(2, 2, 0).shard(2).device_rows, (std::vector<int64_t>{1, 1}));
  const Shard none = DistributedSampler(2, 2, 1).shard(2);
  EXPECT_TRUE(none.device_rows.empty());
  EXPECT_EQ(none.rows(), 0);
  EXPECT_EQ(none.begin, 2);
  // 13 rows over 6 devices (chunks 3, 3, 3, 3, 1): rank 2 of 3 x 2 holds global devices 4 and 5, the 1-row chunk.
  const Shard last = DistributedSampler(3, 2, 2).shard(13);
  EXPECT_EQ(last.begin, 12);
  EXPECT_EQ(last.device_rows, (std::vector<int64_t>{1}));
  EXPECT_EQ(DistributedSampler(3, 2, 1).shard(13).device_rows, (std::vector<int64_t>{3, 3}));
  EXPECT_TRUE(DistributedSampler(3, 2, 0).shard(0).device_rows.empty());
}

TEST(DistributedSampler, ALoaderWithoutASamplerHasOneShardOfAllRows) {
  const TableDataset data = rows_and_negatives(10);
  DataLoader loader(data, 4, /*shuffle=*/false, 0);
  loader.begin_epoch();
  const Batch last = loader.batch(2);
  EXPECT_EQ(last.global_rows, 2);
  EXPECT_EQ(last.device_rows, (std::vector<int64_t>{2}));
  EXPECT_EQ(last.features.to_vector(), (std::vector<float>{8, 9}));
}

TEST(DistributedSampler, RefusesBadLayouts) {
  EXPECT_ERROR(DistributedSampler(0, 1, 0), "DistributedSampler: processes is 0 but expected at least 1");
  EXPECT_ERROR(DistributedSampler(2, 0, 0), "devices_per_process is 0 but expected at least 1");
  EXPECT_ERROR(DistributedSampler(2, 1, 2), "rank is 2 but expected one in [0, 2)");
  EXPECT_ERROR(DistributedSampler(2, 1, -1), "rank is -1 but expected one in [0, 2)");
  EXPECT_ERROR(DistributedSampler().shard(-1), "DistributedSampler::shard: batch_rows is -1 but expected >= 0");
}

}  // namespace
}  // namespace tandem::trainers

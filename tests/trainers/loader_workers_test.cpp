// DataLoader's workers (Note [Loader workers] in loader.cpp): the same batches, in the same order, for any number
// of workers; a worker's error reaches the caller; random access; a bounded prefetch; a loader that moves.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

// Example i: data [3] = {i, 2i, 3i}, target [] = {-i}; get() of `failing` throws. Counts its get() calls.
class Numbered : public Dataset {
 public:
  explicit Numbered(int64_t size, int64_t failing = -1) : size_(size), failing_(failing) {}
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override {
    gets.fetch_add(1);
    TANDEM_CHECK(index != failing_, "Numbered::get: example ", index, " cannot be read");
    const auto i = static_cast<float>(index);
    return {Tensor::from_vector({i, 2 * i, 3 * i}, {3}), Tensor::scalar(-i)};
  }
  mutable std::atomic<int64_t> gets{0};

 private:
  int64_t size_;
  int64_t failing_;
};

// Every batch of `epochs` epochs: data then targets, as host values.
std::vector<std::vector<float>> epochs_of(DataLoader& loader, int epochs) {
  std::vector<std::vector<float>> batches;
  for (int e = 0; e < epochs; ++e) {
    loader.begin_epoch();
    for (int64_t b = 0; b < loader.num_batches(); ++b) {
      const Batch batch = loader.batch(b);
      std::vector<float> values = batch.features.to_vector();
      const std::vector<float> targets = batch.targets.to_vector();
      values.insert(values.end(), targets.begin(), targets.end());
      batches.push_back(std::move(values));
    }
  }
  return batches;
}

TEST(DataLoaderWorkers, TheSameBatchesForAnyNumberOfWorkers) {
  const Numbered data(37);
  DataLoader plain(data, {.batch_size = 5, .shuffle = true, .seed = 11});
  const std::vector<std::vector<float>> expected = epochs_of(plain, 3);
  ASSERT_EQ(expected.size(), 3u * 8u);
  // The first batch of the first epoch, by the rule: the shuffled order's first 5 examples, stacked.
  DataLoader order_probe(data, {.batch_size = 5, .shuffle = true, .seed = 11});
  order_probe.begin_epoch();
  std::vector<float> first;
  for (int r = 0; r < 5; ++r) {
    const auto i = static_cast<float>(order_probe.order()[r]);
    first.insert(first.end(), {i, 2 * i, 3 * i});
  }
  for (int r = 0; r < 5; ++r) first.push_back(-static_cast<float>(order_probe.order()[r]));
  EXPECT_EQ(expected.front(), first);
  for (const int workers : {1, 2, 3, 8}) {
    DataLoader loader(data, {.batch_size = 5, .shuffle = true, .seed = 11, .num_workers = workers});
    EXPECT_EQ(loader.num_workers(), workers);
    EXPECT_EQ(epochs_of(loader, 3), expected) << workers << " workers";
  }
}

TEST(DataLoaderWorkers, DropLastAndShardsAreTheSameWithWorkers) {
  const Numbered data(23);
  const auto group = comm::ProcessGroup::single({Device::cpu(0), Device::cpu(1)});
  const DataLoaderOptions options{
      .batch_size = 4, .shuffle = true, .seed = 3, .drop_last = true, .sampler = DistributedSampler(*group)};
  DataLoader plain(data, options);
  DataLoaderOptions with_workers = options;
  with_workers.num_workers = 3;
  DataLoader loader(data, with_workers);
  EXPECT_EQ(loader.num_batches(), 5);
  EXPECT_EQ(epochs_of(loader, 2), epochs_of(plain, 2));
}

TEST(DataLoaderWorkers, AWorkersErrorReachesTheCallerOfItsBatch) {
  const Numbered data(20, /*failing=*/13);
  DataLoader loader(data, {.batch_size = 4, .num_workers = 2});
  loader.begin_epoch();
  for (int64_t b = 0; b < loader.num_batches(); ++b) {
    if (b == 3) {
      EXPECT_ERROR(loader.batch(b), "Numbered::get: example 13 cannot be read");
    } else {
      EXPECT_EQ(loader.batch(b).features.to_vector()[0], static_cast<float>(4 * b)) << "batch " << b;
    }
  }
}

TEST(DataLoaderWorkers, RandomAccessGivesTheBatchOfItsIndex) {
  const Numbered data(30);
  DataLoader plain(data, {.batch_size = 4, .shuffle = true, .seed = 5});
  DataLoader loader(data, {.batch_size = 4, .shuffle = true, .seed = 5, .num_workers = 2});
  plain.begin_epoch();
  loader.begin_epoch();
  for (const int64_t b : {5, 2, 5, 7, 0, 1, 6}) {
    EXPECT_EQ(loader.batch(b).features.to_vector(), plain.batch(b).features.to_vector()) << "batch " << b;
  }
}

TEST(DataLoaderWorkers, PrefetchIsBounded) {
  const Numbered data(1000);
  DataLoader loader(data, {.batch_size = 10, .num_workers = 2});
  loader.begin_epoch();
  // The workers read ahead without being asked (within 10 s however slow the machine) ...
  for (int waited = 0; data.gets.load() < 10 && waited < 1000; ++waited) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(data.gets.load(), 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // ... fill the prefetch, and stop there:
  // 2 workers x 2 batches of 10 examples, at most 40 examples read before the first batch is taken.
  EXPECT_LE(data.gets.load(), 40);
  testing::expect_values(loader.batch(0).targets, {0, -1, -2, -3, -4, -5, -6, -7, -8, -9}, {10});
}

TEST(DataLoaderWorkers, ResumesFromAShuffleStateAndMoves) {
  const Numbered data(17);
  DataLoader plain(data, {.batch_size = 3, .shuffle = true, .seed = 9});
  (void)epochs_of(plain, 1);
  const uint64_t state = plain.shuffle_state();
  const std::vector<std::vector<float>> expected = epochs_of(plain, 2);
  std::vector<DataLoader> loaders;
  loaders.emplace_back(data, DataLoaderOptions{.batch_size = 3, .shuffle = true, .seed = 0, .num_workers = 2});
  loaders.emplace_back(data, DataLoaderOptions{.batch_size = 3, .num_workers = 1});  // the vector grows: a move
  loaders.front().set_shuffle_state(state);
  EXPECT_EQ(epochs_of(loaders.front(), 2), expected);
}

TEST(DataLoaderWorkers, RefusesBadOptions) {
  const Numbered data(4);
  EXPECT_ERROR(DataLoader(data, {.batch_size = 2, .num_workers = -1}), "DataLoader: num_workers is -1");
  EXPECT_ERROR(DataLoader(data, {.batch_size = 2, .num_workers = 65}), "but expected 0 to 64");
  EXPECT_ERROR(DataLoader(data, {.batch_size = 0}), "DataLoader: batch_size is 0");
  EXPECT_ERROR(DataLoader(Numbered(0), {.batch_size = 1}), "DataLoader: the data set has no examples");
}

}  // namespace
}  // namespace tandem::trainers

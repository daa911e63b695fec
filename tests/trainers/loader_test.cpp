#include <algorithm>
#include <numeric>
#include <set>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

// Row r has features (r, 100 + r) and target 1000 + r, so every batch row tells which data row it is.
TableDataset numbered_rows(int64_t rows) {
  TableDataset data{{"a", "b"}, "y", {}, {}};
  for (int64_t r = 0; r < rows; ++r) {
    data.features.push_back(static_cast<double>(r));
    data.features.push_back(100.0 + static_cast<double>(r));
    data.targets.push_back(1000.0 + static_cast<double>(r));
  }
  return data;
}

std::vector<int64_t> rows_of_epoch(DataLoader& loader) {
  loader.begin_epoch();
  std::vector<int64_t> rows;
  for (int64_t b = 0; b < loader.num_batches(); ++b) {
    Batch batch = loader.batch(b);
    std::vector<float> x = batch.features.to_vector();
    std::vector<float> y = batch.targets.to_vector();
    EXPECT_EQ(batch.features.size(1), 2);
    EXPECT_EQ(batch.targets.size(1), 1);
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_EQ(x[2 * i + 1], 100.0f + x[2 * i]);
      EXPECT_EQ(y[i], 1000.0f + x[2 * i]);
      rows.push_back(static_cast<int64_t>(x[2 * i]));
    }
  }
  return rows;
}

TEST(DataLoader, EveryRowOnceWithAFinalPartialBatch) {
  TableDataset data = numbered_rows(10);
  DataLoader loader(data, 4, /*shuffle=*/true, 7);
  EXPECT_EQ(loader.num_batches(), 3);
  std::vector<int64_t> rows = rows_of_epoch(loader);
  EXPECT_EQ(loader.batch(0).targets.size(0), 4);
  EXPECT_EQ(loader.batch(2).targets.size(0), 2);
  std::vector<int64_t> sorted = rows;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(10);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);
  EXPECT_NE(rows, all);  // shuffled (10! orders; the seed gives a fixed one, which is not the identity)
}

TEST(DataLoader, WithoutShufflingRowsKeepTheirOrder) {
  TableDataset data = numbered_rows(5);
  DataLoader loader(data, 2, /*shuffle=*/false, 7);
  std::vector<int64_t> expected{0, 1, 2, 3, 4};
  EXPECT_EQ(rows_of_epoch(loader), expected);
  EXPECT_EQ(rows_of_epoch(loader), expected);
}

TEST(DataLoader, SeedDecidesTheOrderAndEpochsDiffer) {
  TableDataset data = numbered_rows(50);
  DataLoader a(data, 8, true, 1);
  DataLoader b(data, 8, true, 1);
  DataLoader c(data, 8, true, 2);
  std::vector<int64_t> a1 = rows_of_epoch(a);
  std::vector<int64_t> a2 = rows_of_epoch(a);
  EXPECT_EQ(a1, rows_of_epoch(b));
  EXPECT_NE(a1, a2);
  EXPECT_NE(a1, rows_of_epoch(c));
}

TEST(DataLoader, RestoredShuffleStateRepeatsTheFollowingEpochs) {
  TableDataset data = numbered_rows(30);
  DataLoader first(data, 8, true, 3);
  rows_of_epoch(first);
  const uint64_t state = first.shuffle_state();
  std::vector<int64_t> second_epoch = rows_of_epoch(first);
  std::vector<int64_t> third_epoch = rows_of_epoch(first);

  DataLoader resumed(data, 8, true, 3);
  resumed.set_shuffle_state(state);
  EXPECT_EQ(rows_of_epoch(resumed), second_epoch);
  EXPECT_EQ(rows_of_epoch(resumed), third_epoch);
}

TEST(DataLoader, ShuffleRngIsUniform) {
  ShuffleRng rng(11);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 50000; ++i) ++counts[rng.below(5)];
  for (int count : counts) EXPECT_NEAR(count, 10000, 400);  // about 4.5 standard deviations
}

TEST(DataLoader, DropLastDropsTheShortBatchOnly) {
  TableDataset data = numbered_rows(10);
  DataLoader kept(data, 4, /*shuffle=*/true, 7);
  DataLoader dropped(data, 4, /*shuffle=*/true, 7, {}, /*drop_last=*/true);
  EXPECT_EQ(kept.num_batches(), 3);
  EXPECT_EQ(dropped.num_batches(), 2);
  std::vector<int64_t> all = rows_of_epoch(kept);
  std::vector<int64_t> first_eight = rows_of_epoch(dropped);  // the same permutation, without its last 2 rows
  EXPECT_EQ(first_eight, std::vector<int64_t>(all.begin(), all.begin() + 8));
  EXPECT_EQ(DataLoader(data, 5, false, 0, {}, true).num_batches(), 2);  // nothing short: nothing dropped
  EXPECT_EQ(DataLoader(data, 10, false, 0, {}, true).num_batches(), 1);
  EXPECT_ERROR(DataLoader(data, 11, false, 0, {}, true),
               "DataLoader: drop_last with 10 rows and batch_size 11 leaves no batch; expected a batch_size of at "
               "most 10 or drop_last false");
}

TEST(DataLoader, BadArgumentsAreErrors) {
  TableDataset data = numbered_rows(3);
  EXPECT_ERROR(DataLoader(data, 0, true, 0), "DataLoader: batch_size is 0 but expected at least 1");
  EXPECT_ERROR(DataLoader(numbered_rows(0), 2, true, 0), "DataLoader: the data set has no examples");
  DataLoader loader(data, 2, false, 0);
  loader.begin_epoch();
  EXPECT_ERROR(loader.batch(2), "DataLoader::batch: index 2 but an epoch has 2 batches");
}

}  // namespace
}  // namespace tandem::trainers

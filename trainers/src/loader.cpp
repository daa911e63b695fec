#include "tandem/trainers/loader.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "tandem/core/error.h"
#include "tandem/core/splitmix64.h"

namespace tandem::trainers {

uint64_t ShuffleRng::next() {
  const uint64_t value = splitmix64(state_, 0);
  state_ += kSplitMix64Step;
  return value;
}

uint64_t ShuffleRng::below(uint64_t bound) {
  // Rejects the top partial range so that every value is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t value;
  do {
    value = next();
  } while (value >= limit);
  return value % bound;
}

std::vector<int64_t> epoch_order(int64_t rows, ShuffleRng* shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  if (shuffle == nullptr) return order;
  for (int64_t i = rows - 1; i > 0; --i) {  // Fisher-Yates
    std::swap(order[i], order[shuffle->below(static_cast<uint64_t>(i) + 1)]);
  }
  return order;
}

int64_t count_batches(int64_t rows, int64_t batch_size, bool drop_last, std::string_view who) {
  TANDEM_CHECK(!drop_last || rows == 0 || rows >= batch_size, who, ": drop_last with ", rows, " rows and batch_size ",
               batch_size, " leaves no batch; expected a batch_size of at most ", rows, " or drop_last false");
  return rows / batch_size + (!drop_last && rows % batch_size != 0);
}

DataLoader::DataLoader(const Dataset& data, int64_t batch_size, bool shuffle, uint64_t seed, DistributedSampler sampler,
                       bool drop_last)
    : data_(data), batch_size_(batch_size), shuffle_(shuffle), sampler_(sampler), rng_(seed) {
  TANDEM_CHECK(batch_size >= 1, "DataLoader: batch_size is ", batch_size, " but expected at least 1");
  TANDEM_CHECK(data.rows() >= 1, "DataLoader: the data set has no rows");
  num_batches_ = count_batches(data.rows(), batch_size, drop_last, "DataLoader");
  order_ = epoch_order(data.rows(), nullptr);
}

void DataLoader::begin_epoch() { order_ = epoch_order(data_.rows(), shuffle_ ? &rng_ : nullptr); }

Batch DataLoader::batch(int64_t index) const {
  TANDEM_CHECK(index >= 0 && index < num_batches(), "DataLoader::batch: index ", index, " but an epoch has ",
               num_batches(), " batches");
  const int64_t global_rows = std::min(batch_size_, data_.rows() - index * batch_size_);
  Shard shard = sampler_.shard(global_rows);
  const int64_t start = index * batch_size_ + shard.begin;
  const int64_t rows = shard.rows();
  const int64_t width = data_.num_features();
  std::vector<float> x(rows * width);
  std::vector<float> y(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t source = order_[start + r];
    for (int64_t c = 0; c < width; ++c) x[r * width + c] = static_cast<float>(data_.feature(source, c));
    y[r] = static_cast<float>(data_.targets[source]);
  }
  return Batch{Tensor::from_vector(x, {rows, width}), Tensor::from_vector(y, {rows, 1}), std::move(shard.device_rows),
               global_rows};
}

}  // namespace tandem::trainers

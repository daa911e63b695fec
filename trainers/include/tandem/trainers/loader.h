#pragma once
// DataLoader: batches of a Dataset as float32 tensors, in a seeded shuffled order per epoch; the last batch of an
// epoch holds the remaining rows when the batch size does not divide the number of rows (or, with drop_last, is
// dropped). TensorDataLoader (tensor_loader.h) batches tensors of any dtype the same way. With a DistributedSampler
// (distributed_sampler.h) each batch holds only this process's rows of the global batch, and says how many of them
// go to each of its devices.

#include <cstdint>
#include <string_view>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/trainers/dataset.h"
#include "tandem/trainers/distributed_sampler.h"

namespace tandem::trainers {

struct Batch {
  Tensor features;                   // [rows, num_features] on cpu:0: this process's rows (all of them: no sampler)
  Tensor targets;                    // [rows, 1] on cpu:0
  std::vector<int64_t> device_rows;  // the sampler's Shard::device_rows: rows per device, a prefix of the devices
  int64_t global_rows = 0;           // rows of the global batch, over every process
};

// A small deterministic generator (SplitMix64) whose whole state is one integer, so it is easy to checkpoint.
class ShuffleRng {
 public:
  explicit ShuffleRng(uint64_t state = 0) : state_(state) {}
  uint64_t next();
  uint64_t below(uint64_t bound);  // uniform in [0, bound), bound >= 1
  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

// The rows of one epoch in order: 0, 1, ..., rows - 1, permuted by Fisher-Yates with draws from *shuffle (advancing
// it) when it is given, so that the same state gives the same permutation. The one rule of DataLoader and
// TensorDataLoader.
std::vector<int64_t> epoch_order(int64_t rows, ShuffleRng* shuffle);

// The number of batches of batch_size rows (>= 1) that `rows` rows make: the last holds the remainder, or is dropped
// when it is short and drop_last. Errors: drop_last dropping every row (0 < rows < batch_size), naming `who`.
int64_t count_batches(int64_t rows, int64_t batch_size, bool drop_last, std::string_view who);

class DataLoader {
 public:
  // Keeps a reference to `data`, which must outlive the loader. batch_size >= 1 (global: over every process of the
  // sampler); data must have rows. Every process of a group builds its loader with the same data, batch size and
  // seed, so all draw the same order; the sampler picks each process's rows of every batch. drop_last drops the
  // epoch's last (global) batch when it is short. Errors: batch_size < 1; no rows; drop_last leaving no batch.
  DataLoader(const Dataset& data, int64_t batch_size, bool shuffle, uint64_t seed, DistributedSampler sampler = {},
             bool drop_last = false);

  // Starts the next epoch: with shuffling, draws a new permutation (advancing the shuffle state).
  void begin_epoch();
  int64_t num_batches() const { return num_batches_; }
  // This process's rows of batch `index` of the current epoch, 0 <= index < num_batches() (the same count on every
  // process: each takes part in every step, with no rows when the batch has none left for it).
  Batch batch(int64_t index) const;
  const std::vector<int64_t>& order() const { return order_; }
  int64_t batch_size() const { return batch_size_; }
  const DistributedSampler& sampler() const { return sampler_; }

  // The shuffle state before the next begin_epoch(); restoring it makes the following epochs repeat exactly.
  uint64_t shuffle_state() const { return rng_.state(); }
  void set_shuffle_state(uint64_t state) { rng_ = ShuffleRng(state); }

 private:
  const Dataset& data_;
  int64_t batch_size_;
  bool shuffle_;
  DistributedSampler sampler_;
  int64_t num_batches_;
  ShuffleRng rng_;
  std::vector<int64_t> order_;
};

}  // namespace tandem::trainers

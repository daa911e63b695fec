#pragma once
// DataLoader: batches of any Dataset (dataset.h) in a seeded shuffled order per epoch, each batch the data set's
// collate() of its examples; the last batch of an epoch holds the remaining examples when the batch size does not
// divide their number (or, with drop_last, is dropped). With num_workers, threads make the next batches ahead of the
// caller (a bounded prefetch), and the batches and their order are the same for any number of workers (Note [Loader
// workers] in loader.cpp). TensorDataLoader (tensor_loader.h) batches tensors of any dtype straight onto devices,
// from pinned memory. With a DistributedSampler (distributed_sampler.h) each batch holds only this process's rows of
// the global batch, and says how many of them go to each of its devices.
//
//   DataLoader loader(data, {.batch_size = 64, .shuffle = true, .seed = 7, .num_workers = 4});
//   for (int epoch = 0; epoch < 10; ++epoch) {
//     loader.begin_epoch();
//     for (int64_t b = 0; b < loader.num_batches(); ++b) {
//       const Batch batch = loader.batch(b);   // features = the collated data, targets = the collated targets
//     }
//   }

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/trainers/dataset.h"
#include "tandem/trainers/distributed_sampler.h"

namespace tandem::trainers {

struct Batch {
  Tensor features;                   // the collated data of this process's rows (all of them: no sampler), [rows, ...]
  Tensor targets;                    // the collated targets, [rows, ...] (a TableDataset's: [rows, 1])
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

struct DataLoaderOptions {
  int64_t batch_size = 1;        // global: over every process of the sampler
  bool shuffle = false;          // a new seeded permutation every epoch
  uint64_t seed = 0;             // the shuffle's seed
  bool drop_last = false;        // drop the epoch's last (global) batch when it is short
  int num_workers = 0;           // threads making batches ahead of the caller; 0: batch() makes each itself
  DistributedSampler sampler{};  // this process's rows of every batch
};

class DataLoader {
 public:
  // Keeps a reference to `data`, which must outlive the loader. Every process of a group builds its loader with the
  // same data, batch size and seed, so all draw the same order; the sampler picks each process's rows of every batch.
  // Errors: batch_size < 1; no examples; drop_last leaving no batch; num_workers outside [0, 64].
  DataLoader(const Dataset& data, DataLoaderOptions options);
  DataLoader(const Dataset& data, int64_t batch_size, bool shuffle, uint64_t seed, DistributedSampler sampler = {},
             bool drop_last = false);
  ~DataLoader();  // stops the workers
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;

  // Starts the next epoch: with shuffling, draws a new permutation (advancing the shuffle state); the workers start
  // on its first batches.
  void begin_epoch();
  int64_t num_batches() const;
  // This process's rows of batch `index` of the current epoch, 0 <= index < num_batches() (the same count on every
  // process: each takes part in every step, with no rows when the batch has none left for it): the data set's
  // collate() of their examples, in the epoch's order. Errors: index out of range; the data set's get() or collate()
  // (made by a worker, rethrown here).
  Batch batch(int64_t index) const;
  const std::vector<int64_t>& order() const;
  int64_t batch_size() const;
  const DistributedSampler& sampler() const;
  int num_workers() const;

  // The shuffle state before the next begin_epoch(); restoring it makes the following epochs repeat exactly.
  uint64_t shuffle_state() const;
  void set_shuffle_state(uint64_t state);

 private:
  struct State;                         // what a batch is made from (loader.cpp)
  struct Prefetch;                      // the workers (Note [Loader workers])
  std::unique_ptr<State> state_;        // on the heap: the workers refer to it, and the loader may move
  std::unique_ptr<Prefetch> prefetch_;  // null without workers; declared after state_: stopped first
};

}  // namespace tandem::trainers

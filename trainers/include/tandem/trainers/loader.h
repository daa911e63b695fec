#pragma once
// DataLoader: batches of any Dataset (dataset.h) in a seeded shuffled order per epoch, as PyTorch's DataLoader over
// a map-style data set: each batch is the data set's get_batch() of its examples (by default collate() of get() of
// each), the last batch of an epoch holds the remaining examples when the batch size does not divide their number
// (or, with drop_last, is dropped). With num_workers, threads make the next batches ahead of the caller (a bounded
// prefetch), and the batches and their order are the same for any number of workers (Note [Loader workers] in
// loader.cpp). With a DistributedSampler (distributed_sampler.h) each batch holds only this process's rows of the
// global batch, and says how many of them go to each of its devices. With `devices`, each batch arrives cut over them
// (chunk d on devices[d], comm::scatter's rule), the chunks for GPUs copied asynchronously from pinned memory when
// pin_memory is set (Note [Pinned staging] in loader.cpp).
//
//   DataLoader loader(data, {.batch_size = 64, .shuffle = true, .seed = 7, .num_workers = 4});
//   for (int epoch = 0; epoch < 10; ++epoch) {
//     for (const Batch& batch : loader) {  // one epoch: begin() starts it (begin_epoch)
//       // batch.features = the collated data, batch.targets = the collated targets (on the host)
//     }
//   }
//   DataLoader to_gpus(data, {.batch_size = 256, .shuffle = true, .pin_memory = true,
//                             .devices = {Device::cuda(0), Device::cuda(1)}});
//   to_gpus.begin_epoch();
//   const Batch batch = to_gpus.batch(0);  // batch.inputs[d], batch.labels[d] on devices[d]

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"
#include "tandem/trainers/dataset.h"
#include "tandem/trainers/distributed_sampler.h"
#include "tandem/trainers/image_transforms.h"

namespace tandem::trainers {

// One batch of this process: on the host without DataLoaderOptions::devices, placed on them with.
struct Batch {
  Tensor features;  // without devices: the collated data of this process's rows (all of them: no sampler), [rows, ...]
  Tensor targets;   // without devices: the collated targets, [rows, ...] (a TableDataset's: [rows, 1])
  // With devices: chunk d of the data and of the targets on devices[d], one per device that receives rows (a prefix
  // of the devices; none when this process has no rows in the batch).
  std::vector<Tensor> inputs;
  std::vector<Tensor> labels;
  std::vector<int64_t> device_rows;  // the sampler's Shard::device_rows: rows per device, a prefix of the devices
  int64_t global_rows = 0;           // rows of the global batch, over every process

  int64_t rows() const;  // this process's rows: the sum of device_rows
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
// it) when it is given, so that the same state gives the same permutation. The one rule of DataLoader's orders.
std::vector<int64_t> epoch_order(int64_t rows, ShuffleRng* shuffle);

// The number of batches of batch_size rows (>= 1) that `rows` rows make: the last holds the remainder, or is dropped
// when it is short and drop_last. Errors: drop_last dropping every row (0 < rows < batch_size), naming `who`.
int64_t count_batches(int64_t rows, int64_t batch_size, bool drop_last, std::string_view who);

struct DataLoaderOptions {
  int64_t batch_size = 1;  // global: over every process of the sampler
  bool shuffle = false;    // a new seeded permutation every epoch
  uint64_t seed = 0;       // the shuffle's seed
  bool drop_last = false;  // drop the epoch's last (global) batch when it is short
  int num_workers = 0;     // threads making batches ahead of the caller; 0: batch() makes each itself
  // Page-locked host memory (Note [Pinned staging]): the chunks for CUDA devices are pinned by the worker that makes
  // them and copied asynchronously (without it: from pageable memory, each copy waiting for itself); without devices
  // the batches themselves are pinned, for the caller's to(device, /*non_blocking=*/true). Ignored where there is no
  // GPU to pin for (CPU devices; no devices and no GPU in this process), as PyTorch ignores it (with a warning) on a
  // machine without one.
  bool pin_memory = false;
  // Where the batches go: chunk d of every batch (comm::scatter's rule, Note [Sharding per global batch]: chunks of
  // ceil(rows / devices) rows, fewer chunks than devices when a batch has fewer rows) to devices[d], distinct
  // devices. Empty: batches stay on the host (Batch::features and targets).
  std::vector<Device> devices = {};
  // This process's rows of every global batch, and how many of them go to each device. With devices, a sampler of
  // several processes must have devices.size() devices per process; the default (one process) cuts each batch over
  // the devices.
  DistributedSampler sampler = {};
  // Applied to the data of every batch (each device's chunk) as it is made, with the examples' indices and the epoch
  // (image_transforms.h); null: none.
  std::shared_ptr<const BatchTransform> transform = nullptr;
};

class DataLoader {
 public:
  // Keeps a reference to `data`, which must outlive the loader. Every process of a group builds its loader with the
  // same data, batch size and seed, so all draw the same order; the sampler picks each process's rows of every batch.
  // Errors: batch_size < 1; no examples; drop_last leaving no batch; num_workers outside [0, 64]; a device listed
  // twice or missing; a sampler whose devices per process differ from the number of devices.
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
  // get_batch() of their examples, in the epoch's order (with devices, of each device's chunk), each batch in tensors
  // of its own. Errors: index out of range; the data set's get_batch() (made by a worker, rethrown here).
  Batch batch(int64_t index) const;
  const std::vector<int64_t>& order() const;
  int64_t batch_size() const;
  const DistributedSampler& sampler() const;  // as given (the default: one process)
  int num_workers() const;
  const std::vector<Device>& devices() const;
  const Dataset& dataset() const;

  // The shuffle state before the next begin_epoch(); restoring it makes the following epochs repeat exactly.
  uint64_t shuffle_state() const;
  void set_shuffle_state(uint64_t state);
  // The number of the current epoch, what the transform receives: 0 after the first begin_epoch(), one more after
  // each next one (-1 before the first). set_epoch(e) makes the next begin_epoch() start epoch e, as a resumed run
  // needs with set_shuffle_state. Errors: e < 0.
  int64_t epoch() const;
  void set_epoch(int64_t epoch);

  // One epoch as a range: begin() starts the next epoch (begin_epoch) and makes its first batch; each step makes the
  // next. An input iterator: the batch it refers to is replaced by the next one on ++.
  class Iterator {
   public:
    const Batch& operator*() const { return batch_; }
    const Batch* operator->() const { return &batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return index_ == other.index_; }

   private:
    friend class DataLoader;
    Iterator(const DataLoader* loader, int64_t index);
    const DataLoader* loader_;
    int64_t index_;
    Batch batch_;
  };
  Iterator begin();
  Iterator end() const;

 private:
  struct State;                         // what a batch is made from (loader.cpp)
  struct Prefetch;                      // the workers (Note [Loader workers])
  std::unique_ptr<State> state_;        // on the heap: the workers refer to it, and the loader may move
  std::unique_ptr<Prefetch> prefetch_;  // null without workers; declared after state_: stopped first
};

}  // namespace tandem::trainers

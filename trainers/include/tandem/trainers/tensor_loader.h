#pragma once
// TensorDataLoader: the batches of a TensorDataset, epoch by epoch, as PyTorch's DataLoader over a TensorDataset:
// shuffled under a seed (DataLoader's permutation: the same seed gives DataLoader's order), the last short batch kept
// or dropped, this process's share picked by a DistributedSampler or a sharding hook, and with `devices` scattered
// over devices (chunk d to devices[d], comm::scatter's rule), the chunks for GPUs copied asynchronously from pinned
// staging buffers.
//
//   TensorDataset data({features, labels});
//   TensorDataLoader loader(data, {.batch_size = 256, .shuffle = true, .seed = 7, .pin_memory = true,
//                                  .devices = {Device::cuda(0), Device::cuda(1)}});
//   for (int epoch = 0; epoch < 10; ++epoch) {
//     for (const TensorBatch& batch : loader) {  // one epoch: begin() starts it (begin_epoch)
//       // batch.parts[d] = {features rows, labels rows} on devices[d]
//     }
//   }
//
// Sharding. Two ways, never both (the constructor refuses it):
//   - options.sampler, a DistributedSampler: every process of a group builds its loader with the same data, batch
//     size and seed, so all draw the same order, and the sampler gives each process its contiguous run of every
//     GLOBAL batch (batch_size counts the rows of all processes; Note [Sharding per global batch] in
//     distributed_sampler.h). Every process has the same number of batches, some possibly without rows.
//   - options.shard, a hook: shard(epoch, order) receives the epoch's number (0, 1, ...) and the epoch's order of
//     every row (shuffled or not) and returns this process's rows, in the order to batch them (a subset, or any
//     list of row indices: PyTorch's DistributedSampler deals every world_size-th index and pads by repeating
//     some). The batches are cut from that list, so batch_size counts this process's rows.
//
// Note [Pinned staging]: with pin_memory, the rows of a chunk for a GPU are gathered on the host into a page-locked
// staging buffer and copied with Tensor::to(device, /*non_blocking=*/true): the host does not wait for the copy and
// goes on to the next batch while the GPU still works. The loader owns a ring of kStagingSlots buffers per GPU
// (allocated by the constructor and reused, so an epoch allocates no host memory), and batch after batch takes the
// next slot of the ring. A slot's buffer must not be overwritten while the copy from its last use may still be
// reading it: that copy ran kStagingSlots batches ago, and the marker recorded right after it is waited for
// (StreamMarker::synchronize) before the slot is filled again. The wait only blocks when the host runs more than
// kStagingSlots batches ahead of the GPU's copies, which also bounds the device memory held by batches queued ahead.

#include <cstdint>
#include <functional>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/stream_marker.h"
#include "tandem/core/tensor.h"
#include "tandem/trainers/distributed_sampler.h"
#include "tandem/trainers/loader.h"
#include "tandem/trainers/tensor_dataset.h"

namespace tandem::trainers {

struct TensorDataLoaderOptions {
  int64_t batch_size = 1;  // >= 1: global over the sampler's processes, or this process's rows with `shard`
  bool shuffle = false;    // a new permutation of the rows every epoch
  uint64_t seed = 0;       // the shuffle's seed: the same seed gives the same permutations, epoch by epoch
  bool drop_last = false;  // drop an epoch's last batch when it is short (with the sampler: the last global batch)
  // Page-locked host memory (Note [Pinned staging]). The chunks for CUDA devices are staged in pinned buffers and
  // copied asynchronously (without pin_memory: staged in pageable memory, each copy waiting for itself). Without
  // devices the batches themselves are pinned, for the caller's to(device, /*non_blocking=*/true). Ignored where
  // there is no GPU to pin for (CPU devices; no devices and no GPU in this process), as PyTorch ignores it (with a
  // warning) on a machine without one.
  bool pin_memory = false;
  // Where the batches go: chunk d of every batch (comm::scatter's rule: chunks of ceil(rows / devices) rows, fewer
  // chunks than devices when a batch has fewer rows) to devices[d], distinct devices. Empty: batches stay on the host
  // (cpu:0).
  std::vector<Device> devices = {};
  // This process's rows of every global batch, and how many of them go to each device. With devices, a sampler of
  // several processes must have devices.size() devices per process; the default (one process) cuts each batch over
  // the devices by comm::scatter's rule.
  DistributedSampler sampler = {};
  // This process's rows of each epoch, from the epoch's number and order (see Sharding above); their number may
  // differ between epochs. Refused together with a sampler other than the default one.
  std::function<std::vector<int64_t>(int64_t epoch, std::vector<int64_t> order)> shard = {};
};

// One batch of this process. parts[d][t] holds the rows of dataset tensor t for the d-th part: with options.devices
// one part per device that receives rows (a prefix of the devices), on that device; without devices one part (also
// when it has no rows), on the host. Each part holds new tensors of its own (a later batch does not change them).
struct TensorBatch {
  std::vector<std::vector<Tensor>> parts;
  std::vector<int64_t> device_rows;  // the rows per device (the sampler's Shard::device_rows; without devices too)
  int64_t global_rows = 0;           // the rows of the global batch over every process (with `shard`: this process's)

  int64_t rows() const;  // this process's rows: the sum of device_rows
  // The batch's tensors, one per dataset tensor, when it is in one part (no devices, or one device); moved out of a
  // temporary batch (so that `for (const Tensor& x : loader.batch(0).tensors())` holds no dangling reference).
  // Errors: several parts, or none.
  const std::vector<Tensor>& tensors() const&;
  std::vector<Tensor> tensors() &&;
};

class TensorDataLoader {
 public:
  // The ring of pinned staging buffers per GPU (Note [Pinned staging]).
  static constexpr int kStagingSlots = 2;

  // Allocates the pinned staging buffers now (pin_memory with CUDA devices). Errors: batch_size < 1; drop_last
  // leaving no batch (more rows in a batch than the data set has; with `shard`, from begin_epoch for the hook's
  // rows); a device listed twice or missing; a sampler of several processes (or devices) given with `shard`; a
  // sampler whose devices per process differ from the number of devices.
  TensorDataLoader(TensorDataset data, TensorDataLoaderOptions options = {});

  // Starts the next epoch: with shuffle, a new permutation (advancing the shuffle state); with `shard`, the hook's
  // rows of this epoch (the hook gets epoch()). Errors: a row index from the hook outside [0, rows) (naming it, its
  // position and the epoch); drop_last leaving the hook's rows no batch.
  void begin_epoch();
  // The number of the epoch the next begin_epoch starts (the epochs begun so far, unless set_epoch moved it).
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t epoch);  // Errors: a negative epoch

  // Batches in the current epoch (before the first begin_epoch: those of the unshuffled order; 0 with `shard`).
  int64_t num_batches() const { return num_batches_; }
  // This process's batch `index` of the current epoch, 0 <= index < num_batches(). Not const: it takes the next
  // staging slot of the ring. Errors: index out of range.
  TensorBatch batch(int64_t index);
  // The epoch's order of every row, and the rows the batches are cut from (with `shard`, the hook's; else the order).
  const std::vector<int64_t>& order() const { return order_; }
  const std::vector<int64_t>& indices() const { return options_.shard ? picked_ : order_; }

  // The shuffle state before the next begin_epoch(); restoring it (with set_epoch for a shard hook that looks at the
  // epoch) makes the following epochs repeat exactly, as DataLoader::shuffle_state does.
  uint64_t shuffle_state() const { return rng_.state(); }
  void set_shuffle_state(uint64_t state) { rng_ = ShuffleRng(state); }

  const TensorDataset& dataset() const { return data_; }
  const TensorDataLoaderOptions& options() const { return options_; }

  // One epoch as a range: begin() starts the next epoch (begin_epoch) and loads its first batch; each step loads
  // the next. An input iterator: the batch it refers to is replaced by the next one on ++.
  class Iterator {
   public:
    const TensorBatch& operator*() const { return batch_; }
    const TensorBatch* operator->() const { return &batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return index_ == other.index_; }

   private:
    friend class TensorDataLoader;
    Iterator(TensorDataLoader* loader, int64_t index);
    TensorDataLoader* loader_;
    int64_t index_;
    TensorBatch batch_;
  };
  Iterator begin();
  Iterator end();

 private:
  // One slot of a GPU's staging ring: a pinned buffer per dataset tensor, and the marker of its last copy.
  struct StagingSlot {
    std::vector<Tensor> buffers;
    StreamMarker copied;
  };
  // The data set's tensor t: rows indices()[first, first + count) as a new tensor on `device`, staged in `slot` when
  // given.
  Tensor gather_rows(size_t t, int64_t first, int64_t count, Device device, StagingSlot* slot) const;
  bool pins_host_batches() const;

  TensorDataset data_;
  TensorDataLoaderOptions options_;
  DistributedSampler splitter_;  // cuts each batch over processes and devices
  ShuffleRng rng_;
  int64_t epoch_ = 0;
  std::vector<int64_t> order_;
  std::vector<int64_t> picked_;  // the shard hook's rows of this epoch
  int64_t num_batches_ = 0;
  std::vector<std::vector<StagingSlot>> staging_;  // [device][slot]; empty for devices without pinned staging
  std::vector<int64_t> next_slot_;                 // [device]
};

}  // namespace tandem::trainers

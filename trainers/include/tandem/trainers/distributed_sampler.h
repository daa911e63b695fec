#pragma once
// DistributedSampler: which rows of each global batch a process of a group trains on, so that N processes with M
// devices each see exactly the rows, device by device, that one process with N * M devices sees.
//
//   DataLoader loader(train, /*batch_size=*/64, /*shuffle=*/true, seed, DistributedSampler(*group));
//   loader.begin_epoch();                        // the same shuffled order on every process (same seed)
//   Batch batch = loader.batch(b);               // this process's rows of global batch b
//   // batch.device_rows[i] rows go to group->devices()[i]; batch.global_rows is the whole batch's size
//
// Note [Sharding per global batch]: one process with W devices scatters each batch of B rows with Tensor::chunk's
// rules (comm::scatter without chunk sizes): chunks of ceil(B / W) rows, the last one shorter, and fewer than W
// chunks when B is small (13 rows over 6 devices: 5 chunks of 3, 3, 3, 3, 1). The sampler cuts every global batch the
// same way over the world_devices() = N * M devices of the group and gives the process of rank r the chunks of the
// global devices [r * M, (r + 1) * M): one contiguous run of the batch, possibly short or empty. Every process takes
// part in every step (each step is a collective), with no rows when the batch has none left for it.
//
// How this differs from PyTorch's DistributedSampler, which deals every N-th index of the epoch to each rank and
// pads the epoch by repeating indices so that all ranks get equally many: here the epoch's order is cut per global
// batch into contiguous chunks, nothing is padded or dropped, and the last batch may leave some devices (or whole
// processes) without rows. That is what makes a multi-process run equal the single-process run on the same total
// devices, step for step, which tandem guarantees; the losses are weighted by each chunk's share of the global batch
// (see train_step.h), so uneven chunks still give the gradient of the full batch's mean.

#include <cstdint>
#include <vector>

namespace tandem::comm {
class ProcessGroup;
}

namespace tandem::trainers {

// One process's part of a global batch: the rows [begin, begin + rows()) of the batch, with device_rows[i] of them
// for the process's i-th device. device_rows holds only devices that receive rows (each entry >= 1), always a prefix
// of the devices: empty when the process has no rows in this batch.
struct Shard {
  int64_t begin = 0;
  std::vector<int64_t> device_rows;

  int64_t rows() const;
};

class DistributedSampler {
 public:
  // One process driving one device: every batch is one shard of all its rows (the loader's plain behaviour).
  DistributedSampler() = default;
  // The process of rank `rank` among `processes`, each driving `devices_per_process` devices.
  // Errors: processes < 1, devices_per_process < 1, rank outside [0, processes).
  DistributedSampler(int64_t processes, int64_t devices_per_process, int64_t rank);
  // This process's place in `group`: group.size() processes of group.devices().size() devices, rank group.rank().
  explicit DistributedSampler(const comm::ProcessGroup& group);

  int64_t processes() const { return processes_; }
  int64_t devices_per_process() const { return devices_per_process_; }
  int64_t rank() const { return rank_; }
  int64_t world_devices() const { return processes_ * devices_per_process_; }

  // This process's part of a global batch of `batch_rows` rows (Note [Sharding per global batch]).
  // Errors: batch_rows < 0.
  Shard shard(int64_t batch_rows) const;

 private:
  int64_t processes_ = 1;
  int64_t devices_per_process_ = 1;
  int64_t rank_ = 0;
};

}  // namespace tandem::trainers

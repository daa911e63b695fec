#include "tandem/trainers/distributed_sampler.h"

#include <algorithm>
#include <numeric>

#include "tandem/comm/process_group.h"
#include "tandem/core/error.h"

namespace tandem::trainers {

int64_t Shard::rows() const { return std::accumulate(device_rows.begin(), device_rows.end(), int64_t{0}); }

DistributedSampler::DistributedSampler(int64_t processes, int64_t devices_per_process, int64_t rank)
    : processes_(processes), devices_per_process_(devices_per_process), rank_(rank) {
  TANDEM_CHECK(processes >= 1, "DistributedSampler: processes is ", processes, " but expected at least 1");
  TANDEM_CHECK(devices_per_process >= 1, "DistributedSampler: devices_per_process is ", devices_per_process,
               " but expected at least 1");
  TANDEM_CHECK(rank >= 0 && rank < processes, "DistributedSampler: rank is ", rank, " but expected one in [0, ",
               processes, ")");
}

DistributedSampler::DistributedSampler(const comm::ProcessGroup& group)
    : DistributedSampler(group.size(), static_cast<int64_t>(group.devices().size()), group.rank()) {}

Shard DistributedSampler::shard(int64_t batch_rows) const {
  TANDEM_CHECK(batch_rows >= 0, "DistributedSampler::shard: batch_rows is ", batch_rows, " but expected >= 0");
  Shard shard;
  if (batch_rows == 0) return shard;
  // Tensor::chunk's rule over every device of the group; global device g holds [g * chunk, (g + 1) * chunk).
  const int64_t chunk = batch_rows / world_devices() + (batch_rows % world_devices() != 0);
  const int64_t first_device = rank_ * devices_per_process_;
  shard.begin = std::min(first_device * chunk, batch_rows);
  for (int64_t device = first_device; device < first_device + devices_per_process_; ++device) {
    const int64_t rows = std::min(chunk, batch_rows - device * chunk);
    if (rows <= 0) break;
    shard.device_rows.push_back(rows);
  }
  return shard;
}

}  // namespace tandem::trainers

// The group collectives on CPU devices: the devices of this process first (comm's backends), then the processes
// through the host channel on host float buffers, then back to every local device.
//
// Note [Host collectives are deterministic]: each process sums its devices in device order, the channel sums the
// processes into bits that every process receives alike (HostChannel::all_reduce_sum), and every local device gets a
// copy of that one result. So every device of every process holds the same bits, run after run.
//
// A group of one process uses these collectives on any devices (CUDA too): the channel is never called and every
// collective is comm's own, so such a group behaves exactly as the single-process comm functions.

#include <cstring>
#include <mutex>
#include <span>
#include <string>

#include "collective_progress.h"
#include "comm_backend.h"
#include "device_collectives.h"
#include "device_wait.h"
#include "tandem/comm/comm.h"
#include "tandem/core/error.h"

namespace tandem::comm::detail {
namespace {

std::span<std::byte> bytes_of(const Tensor& tensor) {
  return {static_cast<std::byte*>(tensor.mutable_data_ptr()), static_cast<size_t>(tensor.numel()) * sizeof(float)};
}

std::vector<Tensor> all_but_first(const std::vector<Tensor>& tensors) { return {tensors.begin() + 1, tensors.end()}; }

class HostCollectives final : public DeviceCollectives {
 public:
  HostCollectives(HostChannel& channel, Watchdog& watchdog, CollectiveProgress& progress,
                  const std::vector<Device>& devices)
      : channel_(channel), watchdog_(watchdog), progress_(progress), devices_(devices), backend_(backend_for(devices)) {
    for (const Device& device : devices) {
      TANDEM_INTERNAL_ASSERT(device.is_cpu() || channel.size() == 1, "make_host_collectives: ", device, " with ",
                             channel.size(), " processes");
    }
  }

  void all_reduce(const std::vector<Tensor>& tensors, ReduceOp op) override {
    std::lock_guard lock(mutex_);
    reduce(tensors, op);
  }

  void start_all_reduce(const std::vector<Tensor>& tensors, const std::vector<StreamMarker>& ready,
                        ReduceOp op) override {
    std::lock_guard lock(mutex_);
    if (channel_.size() == 1) {
      if (tensors.size() > 1) backend_.start_all_reduce(tensors, ready);
      return;
    }
    reduce(tensors, op);  // CPU devices: every producer has finished already
  }

  void broadcast(const std::vector<Tensor>& tensors, int root) override {
    std::lock_guard lock(mutex_);
    if (channel_.size() > 1) {
      const std::span<std::byte> data = bytes_of(tensors[0]);
      HostCall call(progress_, watchdog_, "broadcast", data.size());
      channel_.broadcast(data, root);
    }
    copy_first_to_others(tensors);
  }

  void all_gather(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) override {
    std::lock_guard lock(mutex_);
    // This process's devices into its block of outputs[0] (rows in global device order), the other processes'
    // blocks through the channel, then outputs[0] to the other devices.
    const int64_t rows = inputs[0].size(0);
    const int64_t local = static_cast<int64_t>(inputs.size());
    const Tensor mine = outputs[0].narrow(0, channel_.rank() * local * rows, local * rows);
    std::vector<Tensor> slots;
    for (int64_t i = 0; i < local; ++i) slots.push_back(mine.narrow(0, i * rows, rows));
    backend_.copy(inputs, slots);
    if (channel_.size() > 1) {
      const std::span<std::byte> block = bytes_of(mine);
      std::vector<std::byte> all;
      {
        HostCall call(progress_, watchdog_, "all_gather", block.size());
        all = channel_.all_gather(block);
      }
      const std::span<std::byte> whole = bytes_of(outputs[0]);
      TANDEM_INTERNAL_ASSERT(all.size() == whole.size(), "HostCollectives::all_gather: got ", all.size(), " bytes for ",
                             whole.size());
      std::memcpy(whole.data(), all.data(), all.size());
    }
    copy_first_to_others(outputs);
  }

  // The all-reduce of copies of the inputs, of which each device keeps its chunk.
  void reduce_scatter(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, ReduceOp op) override {
    std::lock_guard lock(mutex_);
    std::vector<Tensor> sums;
    for (const Tensor& input : inputs) sums.push_back(input.clone());
    reduce(sums, op);
    const int64_t rows = outputs[0].size(0);
    std::vector<Tensor> chunks;
    for (size_t i = 0; i < sums.size(); ++i) {
      const int64_t global =
          static_cast<int64_t>(channel_.rank()) * static_cast<int64_t>(sums.size()) + static_cast<int64_t>(i);
      chunks.push_back(sums[i].narrow(0, global * rows, rows));
    }
    backend_.copy(chunks, outputs);
  }

  // The all-reduce of the tensors themselves: each chunk is a view of its reduced tensor.
  void reduce_scatter_in_place(const std::vector<Tensor>& tensors, const std::vector<Tensor>& chunks,
                               ReduceOp op) override {
    (void)chunks;
    std::lock_guard lock(mutex_);
    reduce(tensors, op);
  }

  void synchronize() override { wait_for_devices(devices_); }

 private:
  // all_reduce under the lock.
  void reduce(const std::vector<Tensor>& tensors, ReduceOp op) {
    if (tensors.size() > 1) backend_.all_reduce(tensors);
    if (channel_.size() == 1) return;  // the sum over one process; its average is the same
    const std::span<float> sum(tensors[0].mutable_data(), static_cast<size_t>(tensors[0].numel()));
    {
      HostCall call(progress_, watchdog_, "all_reduce", sum.size_bytes());
      channel_.all_reduce_sum(sum);
    }
    if (op == ReduceOp::Average) {
      const auto processes = static_cast<float>(channel_.size());
      for (float& value : sum) value /= processes;
    }
    copy_first_to_others(tensors);
  }

  // tensors[1..] = tensors[0], as comm's copies (overlapping where the devices allow).
  void copy_first_to_others(const std::vector<Tensor>& tensors) {
    if (tensors.size() == 1) return;
    backend_.copy(std::vector<Tensor>(tensors.size() - 1, tensors[0]), all_but_first(tensors));
  }

  HostChannel& channel_;
  Watchdog& watchdog_;
  CollectiveProgress& progress_;  // numbers every call over the channel (Note [Desync reports])
  std::vector<Device> devices_;
  Backend& backend_;
  std::mutex mutex_;  // one collective at a time: the channel's calls must not interleave
};

}  // namespace

std::unique_ptr<DeviceCollectives> make_host_collectives(HostChannel& channel, Watchdog& watchdog,
                                                         CollectiveProgress& progress,
                                                         const std::vector<Device>& devices) {
  return std::make_unique<HostCollectives>(channel, watchdog, progress, devices);
}

}  // namespace tandem::comm::detail

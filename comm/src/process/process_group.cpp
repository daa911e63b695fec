// ProcessGroup: the factories, the argument checks of every collective (all made before anything is sent, so that
// a mistake is an Error on the rank that made it instead of a mismatch on the others), and ProcessGroup::Impl.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "desync_report.h"
#include "process_group_impl.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"

namespace tandem::comm {
namespace {

std::atomic<bool> group_alive{false};

void check_group_devices(const std::vector<Device>& devices, const ProcessGroupOptions& options, const char* fn) {
  TANDEM_CHECK(!devices.empty(), fn, ": got no devices but expected this process's devices (one or more)");
  check_distinct(devices, fn, "devices");
  for (const Device& device : devices) check_device_available(device, fn);
  for (const Device& device : devices) {
    TANDEM_CHECK(device.type() == devices[0].type(), fn, ": devices ", to_string(devices),
                 " mix CPU and CUDA devices but expected devices of one type");
  }
  TANDEM_CHECK(options.timeout.count() > 0, fn, ": options.timeout is ", options.timeout.count(),
               " ms but expected a positive duration");
}

// One contiguous float32 tensor per device of this process, in devices() order, all of one shape.
void check_tensors(const std::vector<Tensor>& tensors, const std::vector<Device>& devices, const char* fn) {
  TANDEM_CHECK(tensors.size() == devices.size(), fn, ": got ", tensors.size(),
               " tensors but expected one per device of this process (", devices.size(), ": ", to_string(devices), ")");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TANDEM_CHECK(t.defined(), fn, ": tensor ", i, " is undefined");
    TANDEM_CHECK(t.device() == devices[i], fn, ": tensor ", i, " is on ", t.device(), " but expected ", devices[i],
                 " (devices()[", i, "])");
    TANDEM_CHECK(t.dtype() == DType::Float32, fn, ": tensor ", i, " is not float32");
    TANDEM_CHECK(t.is_contiguous(), fn, ": tensor ", i, " (shape ", to_string(t.shape()), ", strides ",
                 to_string(t.strides()), ") is not contiguous");
    TANDEM_CHECK(t.shape() == tensors[0].shape(), fn, ": tensor ", i, " has shape ", to_string(t.shape()),
                 " but expected ", to_string(tensors[0].shape()), " (tensor 0's)");
  }
}

// The rows of each device's chunk, after reduce_scatter's checks.
int64_t scattered_rows(const std::vector<Tensor>& tensors, const std::vector<Device>& devices, size_t world_devices,
                       const char* fn) {
  check_tensors(tensors, devices, fn);
  TANDEM_CHECK(tensors[0].dim() > 0, fn,
               ": the tensors are 0-dim but expected at least one dimension to scatter along");
  const auto world = static_cast<int64_t>(world_devices);
  TANDEM_CHECK(tensors[0].size(0) % world == 0, fn, ": dim 0 has size ", tensors[0].size(0),
               " but expected a multiple of world_devices() = ", world);
  return tensors[0].size(0) / world;
}

// One empty tensor per device of `tensors`' shape with dim 0 of `rows`.
std::vector<Tensor> outputs_like(const std::vector<Tensor>& tensors, int64_t rows) {
  Shape shape = tensors[0].shape();
  shape[0] = rows;
  std::vector<Tensor> outputs;
  for (const Tensor& t : tensors) outputs.push_back(Tensor::empty(shape, t.device()));
  return outputs;
}

const char* type_name(int32_t type) { return type == static_cast<int32_t>(DeviceType::CUDA) ? "CUDA" : "CPU"; }

}  // namespace

// ---- ProcessGroup::Impl ----------------------------------------------------------------------------------------

ProcessGroup::Impl::LiveClaim::LiveClaim() {
  TANDEM_CHECK(!group_alive.exchange(true),
               "ProcessGroup: a group is alive in this process already but expected "
               "at most one (MPI and the host channel belong to the process): destroy it first");
}

ProcessGroup::Impl::LiveClaim::~LiveClaim() { group_alive.store(false); }

ProcessGroup::Impl::Impl(LaunchInfo& info, const std::vector<Device>& devices, const ProcessGroupOptions& options)
    : rank_(info.rank), watchdog_(options.timeout, [this](const std::string& reason) {
        const detail::HostChannel* channel = abort_channel_.load();
        const std::string waiting = channel != nullptr ? channel->waiting_for() : std::string();
        abort("comm: rank " + std::to_string(rank_) + ": " + reason + (waiting.empty() ? "" : "; " + waiting));
      }) {
  {
    detail::Armed armed(watchdog_, "the rendezvous of the processes");
    switch (info.channel) {
      case LaunchInfo::Channel::None:
        channel_ = detail::make_single_channel();
        break;
      case LaunchInfo::Channel::Mpi:
        channel_ = detail::make_mpi_channel(info);
        break;
      case LaunchInfo::Channel::File:
        channel_ = detail::make_file_channel(info, options.timeout);
        break;
    }
  }
  TANDEM_INTERNAL_ASSERT(channel_ != nullptr, "ProcessGroup: no channel for launch channel ",
                         static_cast<int>(info.channel));
  abort_channel_.store(channel_.get());
  if (info.size == 0) info.size = channel_->size();  // Note [Launcher precedence] in launch_info.cpp
  TANDEM_INTERNAL_ASSERT(channel_->rank() == info.rank && channel_->size() == info.size,
                         "ProcessGroup: the channel has rank ", channel_->rank(), " of ", channel_->size());
  if (info.size > 1) {
    terminate_abort_ =
        std::make_unique<detail::TerminateAbort>(rank_, [this](std::string_view message) { abort(message); });
  }
  check_devices_agree(devices);
  if (info.size == 1 || devices[0].is_cpu()) {
    collectives_ = detail::make_host_collectives(*channel_, watchdog_, progress_, devices);
    if (info.size > 1) {
      channel_->answer_progress(progress_);
      reports_progress_ = true;
    }
  } else {
    collectives_ = detail::make_nccl_collectives(*channel_, watchdog_, devices);
  }
  abort_collectives_.store(collectives_.get());
}

// The NCCL communicators are aborted first, so that kernels waiting for peers that will never come end and the
// channel's abort is not held up behind them (Note [A distributed job never hangs] in watchdog.h).

// The collectives' destructor may wait (bounded by the watchdog); an abort meanwhile ends the job through the channel
// alone rather than through an object being destroyed.
ProcessGroup::Impl::~Impl() { abort_collectives_.store(nullptr); }

// Every process learns every process's device count and type, so a mismatch is the same Error on every rank.
void ProcessGroup::Impl::check_devices_agree(const std::vector<Device>& devices) {
  const int32_t mine[2] = {static_cast<int32_t>(devices.size()), static_cast<int32_t>(devices[0].type())};
  std::vector<std::byte> gathered;
  {
    detail::Armed armed(watchdog_, "the exchange of the processes' devices");
    gathered = channel_->all_gather(std::as_bytes(std::span(mine)));
  }
  std::vector<int32_t> all(gathered.size() / sizeof(int32_t));
  std::memcpy(all.data(), gathered.data(), all.size() * sizeof(int32_t));
  for (int r = 1; r < channel_->size(); ++r) {
    const int32_t count = all[2 * r], type = all[2 * r + 1];
    TANDEM_CHECK(count == all[0] && type == all[1], "ProcessGroup::from_environment: rank 0 drives ", all[0], " ",
                 type_name(all[1]), " device(s) but rank ", r, " drives ", count, " ", type_name(type),
                 " device(s) (expected every process to drive the same number of devices of one type)");
  }
}

// Note [The first failure names the job's end]: aborting the NCCL communicators makes a collective that waits inside
// NCCL on another thread fail, and that failure (an exception, then std::terminate's handler) would abort the job a
// second time with NCCL's message instead of the reason that started it. So only the first abort proceeds; a later
// caller waits for it to end the process (which it does: the channel's abort does not return).
void ProcessGroup::Impl::abort(std::string_view message) {
  if (aborting_.exchange(true)) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  // What the program printed stays printed (std::_Exit and MPI_Abort drop stdio's buffers). Another thread may hold
  // stdout's lock, even forever (it may be the one that waits in a collective): then the buffer is left as it is,
  // since waiting for the lock could hang the abort.
  if (ftrylockfile(stdout) == 0) {
    std::fflush(stdout);
    funlockfile(stdout);
  }
  if (detail::DeviceCollectives* collectives = abort_collectives_.load()) collectives->abort();
  if (detail::HostChannel* channel = abort_channel_.load()) channel->abort(with_desync_report(*channel, message));
  std::fprintf(stderr, "%.*s\n", static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  std::_Exit(1);
}

// Note [Desync reports] in collective_progress.h: the other processes get at most this long to answer.
constexpr std::chrono::milliseconds kProgressWait{2000};

std::string ProcessGroup::Impl::with_desync_report(detail::HostChannel& channel, std::string_view message) {
  std::string text(message);
  if (!reports_progress_.load()) return text;
  const auto wait = std::min<std::chrono::milliseconds>(watchdog_.timeout(), kProgressWait);
  try {
    return text + "; collectives: " + detail::desync_report(channel.gather_progress(progress_.snapshot(), wait));
  } catch (const std::exception&) {
    return text;  // the abort goes on without its report (out of memory)
  }
}

// ---- ProcessGroup ------------------------------------------------------------------------------------------------

std::shared_ptr<ProcessGroup> ProcessGroup::from_environment(std::vector<Device> devices, ProcessGroupOptions options) {
  check_group_devices(devices, options, "ProcessGroup::from_environment");
  return std::make_shared<ProcessGroup>(LaunchInfo::from_environment(), std::move(devices), options);
}

std::shared_ptr<ProcessGroup> ProcessGroup::single(std::vector<Device> devices, ProcessGroupOptions options) {
  check_group_devices(devices, options, "ProcessGroup::single");
  return std::make_shared<ProcessGroup>(LaunchInfo{}, std::move(devices), options);
}

ProcessGroup::ProcessGroup(LaunchInfo info, std::vector<Device> devices, ProcessGroupOptions options)
    : info_(std::move(info)), devices_(std::move(devices)), options_(options) {
  check_group_devices(devices_, options_, "ProcessGroup");
  impl_ = std::make_unique<Impl>(info_, devices_, options_);
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::all_reduce(std::vector<Tensor>& tensors, ReduceOp op) {
  check_tensors(tensors, devices_, "ProcessGroup::all_reduce");
  if (tensors[0].numel() == 0) return;
  NoGradGuard no_grad;
  impl_->collectives().all_reduce(tensors, op);
}

GroupWork ProcessGroup::all_reduce_async(std::vector<Tensor>& tensors, const std::vector<StreamMarker>& ready,
                                         ReduceOp op) {
  constexpr const char* fn = "ProcessGroup::all_reduce_async";
  check_tensors(tensors, devices_, fn);
  TANDEM_CHECK(ready.size() == tensors.size(), fn, ": got ", ready.size(), " markers for ", tensors.size(), " tensors");
  for (size_t i = 0; i < ready.size(); ++i) {
    TANDEM_CHECK(ready[i].device() == tensors[i].device(), fn, ": marker ", i, " is on ", ready[i].device(),
                 " but tensor ", i, " is on ", tensors[i].device());
  }
  if (tensors[0].numel() == 0) return {};
  NoGradGuard no_grad;
  impl_->collectives().start_all_reduce(tensors, ready, op);
  if (devices_[0].is_cpu()) return {};  // complete already
  return GroupWork(tensors);
}

void ProcessGroup::broadcast(std::vector<Tensor>& tensors, int root) {
  constexpr const char* fn = "ProcessGroup::broadcast";
  check_tensors(tensors, devices_, fn);
  TANDEM_CHECK(root >= 0 && root < size(), fn, ": root is ", root, " but expected a rank in [0, ", size(), ")");
  if (tensors[0].numel() == 0) return;
  NoGradGuard no_grad;
  impl_->collectives().broadcast(tensors, root);
}

std::vector<Tensor> ProcessGroup::all_gather(const std::vector<Tensor>& tensors) {
  constexpr const char* fn = "ProcessGroup::all_gather";
  check_tensors(tensors, devices_, fn);
  TANDEM_CHECK(tensors[0].dim() > 0, fn,
               ": the tensors are 0-dim but expected at least one dimension to gather "
               "along");
  NoGradGuard no_grad;
  std::vector<Tensor> outputs = outputs_like(tensors, tensors[0].size(0) * static_cast<int64_t>(world_devices()));
  if (tensors[0].numel() > 0) impl_->collectives().all_gather(tensors, outputs);
  return outputs;
}

std::vector<Tensor> ProcessGroup::reduce_scatter(const std::vector<Tensor>& tensors, ReduceOp op) {
  const int64_t rows = scattered_rows(tensors, devices_, world_devices(), "ProcessGroup::reduce_scatter");
  NoGradGuard no_grad;
  std::vector<Tensor> outputs = outputs_like(tensors, rows);
  if (outputs[0].numel() > 0) impl_->collectives().reduce_scatter(tensors, outputs, op);
  return outputs;
}

std::vector<Tensor> ProcessGroup::reduce_scatter_in_place(std::vector<Tensor>& tensors, ReduceOp op) {
  const int64_t rows = scattered_rows(tensors, devices_, world_devices(), "ProcessGroup::reduce_scatter_in_place");
  NoGradGuard no_grad;
  std::vector<Tensor> chunks;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto global = static_cast<int64_t>(static_cast<size_t>(rank()) * tensors.size() + i);
    chunks.push_back(tensors[i].narrow(0, global * rows, rows));
  }
  if (chunks[0].numel() > 0) impl_->collectives().reduce_scatter_in_place(tensors, chunks, op);
  return chunks;
}

void ProcessGroup::barrier() {
  impl_->collectives().synchronize();
  detail::HostCall call(impl_->progress(), impl_->watchdog(), "barrier", 0);
  impl_->channel().barrier();
}

std::vector<uint64_t> ProcessGroup::exchange(uint64_t value, std::string_view what) {
  std::vector<std::byte> gathered;
  {
    detail::HostCall call(impl_->progress(), impl_->watchdog(), "exchange", sizeof(value), std::string(what));
    gathered = impl_->channel().all_gather(std::as_bytes(std::span(&value, 1)));
  }
  std::vector<uint64_t> values(gathered.size() / sizeof(uint64_t));
  std::memcpy(values.data(), gathered.data(), values.size() * sizeof(uint64_t));
  return values;
}

std::vector<std::string> ProcessGroup::exchange_text(std::string_view mine, std::string_view what) {
  TANDEM_CHECK(mine.size() <= kMaxExchangedText, "ProcessGroup::exchange_text: got ", mine.size(), " bytes for the ",
               what, " but expected at most ", kMaxExchangedText);
  const std::vector<uint64_t> sizes = exchange(mine.size(), what);
  const uint64_t longest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<std::byte> padded(longest, std::byte{0});
  std::memcpy(padded.data(), mine.data(), mine.size());
  std::vector<std::byte> gathered;
  {
    detail::HostCall call(impl_->progress(), impl_->watchdog(), "exchange", padded.size(), std::string(what));
    gathered = impl_->channel().all_gather(padded);
  }
  std::vector<std::string> texts;
  for (size_t p = 0; p < sizes.size(); ++p) {
    const char* begin = reinterpret_cast<const char*>(gathered.data()) + p * longest;
    texts.emplace_back(begin, begin + std::min<uint64_t>(sizes[p], kMaxExchangedText));
  }
  return texts;
}

void ProcessGroup::watch_replay(const char* name) { impl_->collectives().watch_issued(name); }

void ProcessGroup::abort(std::string_view why) {
  impl_->abort("comm: rank " + std::to_string(rank()) + ": " + std::string(why));
}

}  // namespace tandem::comm

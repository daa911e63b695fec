#pragma once
// ProcessGroup::Impl: what stands behind a group: its host channel, its watchdog, the std::terminate handler of a
// multi-process group, and its device collectives.

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collective_progress.h"
#include "device_collectives.h"
#include "host_channel.h"
#include "tandem/comm/process_group.h"
#include "terminate_abort.h"
#include "watchdog.h"

namespace tandem::comm {

class ProcessGroup::Impl {
 public:
  // Claims the process's one live group, starts the channel that `info` names (the watchdog bounding the
  // rendezvous), completes info.size where the launcher left it to MPI, exchanges every process's devices and
  // refuses a mismatch (the same Error on every rank), then creates the device collectives. `devices` are
  // validated.
  Impl(LaunchInfo& info, const std::vector<Device>& devices, const ProcessGroupOptions& options);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  detail::HostChannel& channel() { return *channel_; }
  detail::Watchdog& watchdog() { return watchdog_; }
  detail::DeviceCollectives& collectives() { return *collectives_; }
  detail::CollectiveProgress& progress() { return progress_; }
  // Ends every process of the job with `message` (one line, naming this rank) on stderr, followed by the desync report
  // of a group of CPU devices (Note [Desync reports] in collective_progress.h). Safe from any thread, also before the
  // channel is up (then this process alone ends, and the launcher ends the others).
  [[noreturn]] void abort(std::string_view message);

 private:
  // Makes this the process's one live group; released when the Impl goes (also when its constructor throws).
  class LiveClaim {
   public:
    LiveClaim();
    ~LiveClaim();
    LiveClaim(const LiveClaim&) = delete;
    LiveClaim& operator=(const LiveClaim&) = delete;
  };

  void check_devices_agree(const std::vector<Device>& devices);
  // `message`, followed by "; collectives: <the desync report>" when this group reports its progress.
  std::string with_desync_report(detail::HostChannel& channel, std::string_view message);

  LiveClaim claim_;  // first: released last
  int rank_;
  detail::CollectiveProgress progress_;        // before the channel, which answers with it until it goes
  std::atomic<bool> reports_progress_{false};  // progress_ numbers every collective: CPU devices, several processes
  std::unique_ptr<detail::HostChannel> channel_;
  std::atomic<detail::HostChannel*> abort_channel_{nullptr};  // channel_ once it is up, for the watchdog's thread
  std::atomic<detail::DeviceCollectives*> abort_collectives_{nullptr};  // collectives_ once they are up, likewise
  std::atomic<bool> aborting_{false};  // Note [The first failure names the job's end] in process_group.cpp
  detail::Watchdog watchdog_;
  std::unique_ptr<detail::TerminateAbort> terminate_abort_;  // size() > 1 only
  std::unique_ptr<detail::DeviceCollectives> collectives_;
};

}  // namespace tandem::comm

#pragma once
// The host channel of a process group: how its processes exchange bytes and host floats. Three implementations:
// single (a group of one process: every call is local), mpi/ (MPI_COMM_WORLD; a stub in nompi/ when tandem was built
// without MPI) and file (the torchrun-style rendezvous through files under TANDEM_INIT_METHOD).
//
// Contract for every call: collective over every process of the channel, called in the same order everywhere with
// equal sizes (the front end has checked what it can locally). A call that blocks is bounded by the watchdog
// (watchdog.h), not by the channel: when its deadline passes the watchdog calls abort().

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collective_progress.h"
#include "tandem/comm/process_group.h"

namespace tandem::comm::detail {

class HostChannel {
 public:
  virtual ~HostChannel() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Every process's `mine` (the same number of bytes on every process) concatenated in rank order.
  virtual std::vector<std::byte> all_gather(std::span<const std::byte> mine) = 0;
  // data becomes root's data on every process.
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
  // data becomes the elementwise sum over the processes, bit-identical on every process.
  virtual void all_reduce_sum(std::span<float> data) = 0;
  virtual void barrier() = 0;
  // What a call blocked in this channel waits for, as a clause for the watchdog's message ("waiting for rank 2, which
  // has not entered round 7"); empty when no call waits or the channel cannot tell. Safe from any thread.
  virtual std::string waiting_for() const { return {}; }
  // From now on, this process answers the other processes' gather_progress with `progress`'s snapshot, from a thread
  // of the channel, whatever the process's other threads do (Note [Desync reports] in collective_progress.h).
  // `progress` must outlive the channel. Called once, before any gather_progress; nothing to do for one process.
  virtual void answer_progress(const CollectiveProgress& progress) { (void)progress; }
  // Every process's progress, `mine` for this one, through a side path that no collective of the channel holds up:
  // each other process's answer (answer_progress), nullopt for one that did not answer within `wait`. Not collective:
  // any process may call it, on any thread, on its way to abort(); it never throws.
  virtual std::vector<std::optional<RankProgress>> gather_progress(const RankProgress& mine,
                                                                   std::chrono::milliseconds wait) {
    (void)wait;
    return {mine};
  }
  // Ends every process of the job: `message` (one line, naming this rank) on stderr here, exit status 1 everywhere.
  // Safe to call from any thread, also while another thread is blocked in a call of this channel.
  [[noreturn]] virtual void abort(std::string_view message) = 0;
};

std::unique_ptr<HostChannel> make_single_channel();
// Initializes MPI (once per process, with MPI_THREAD_MULTIPLE for the watchdog's abort); MPI is finalized at process
// exit, since it cannot start twice (Note [MPI lives as long as the process] in mpi/mpi_channel.cpp). Errors: tandem
// built without MPI (naming TANDEM_MPI); the launcher's size or rank differing from MPI_COMM_WORLD's.
std::unique_ptr<HostChannel> make_mpi_channel(const LaunchInfo& info);
// Meets the other processes through files under info.rendezvous_path (Note [File rendezvous] in file_channel.cpp).
// Destroying rank 0's channel waits (at most `timeout`) until every other rank has destroyed its own, so that the
// processes may create channels one after another on the same path.
// Errors: the path unusable; the rendezvous not complete within `timeout`.
std::unique_ptr<HostChannel> make_file_channel(const LaunchInfo& info, std::chrono::milliseconds timeout);

}  // namespace tandem::comm::detail

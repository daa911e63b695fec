#pragma once
// Process groups: several processes, each driving one or more devices, working as one data-parallel job (see
// docs/distributed.md). A group knows this process's rank among the processes, their number, the rank among the
// processes of this machine, and the devices this process drives; every process of a group drives the same number
// of devices. Its collectives span every device of every process:
//   - CUDA devices: one NCCL communicator over every GPU of every process (global device rank
//     rank() * devices().size() + i), its unique id exchanged at creation through the launcher's channel;
//   - virtual CPU devices: through the host channel (MPI under mpirun/srun, the rendezvous file under torchrun-style
//     variables), so every path runs without a GPU.
//
//   auto group = comm::ProcessGroup::from_environment(parse_devices("cuda:0"));   // under mpirun -np 2 ...
//   std::vector<Tensor> grads = {grad};                                            // one per local device
//   group->all_reduce(grads, comm::ReduceOp::Average);
//
// How the processes find each other (ProcessGroup::from_environment):
//   - mpirun (OMPI_COMM_WORLD_* variables), srun (SLURM_PROCID / SLURM_NTASKS with PMI/PMIx) or any MPI launcher
//     (PMI_RANK / PMI_SIZE, PMIX_RANK): MPI is the channel;
//   - torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) with TANDEM_INIT_METHOD=file:///path:
//     the processes meet through files under that path on a file system they share (as PyTorch's FileStore);
//   - nothing of the above: a group of one process, which is exactly the single-process behaviour.
//
// Collective rules (as NCCL's and MPI's): every process calls the same collectives in the same order with tensors
// of the same shapes; tensors[i] lives on devices()[i], is contiguous and float32. Results are ordered like comm's
// functions: asynchronous to the host on CUDA, ordered after the work already issued on the devices' compute
// streams, usable on those streams at once.
//
// CUDA graphs: a collective issued while its streams are being captured (DeviceGraph) is recorded into the graph and
// runs at its replays; the communicator must exist before the capture (it does: the group creates it), every rank
// must capture, and later replay, the same collectives in the same order, and the graphs must be destroyed before the
// group. The watchdog cannot watch a recorded collective; the replays are watched instead (watch_replay). NCCL
// advises one GPU per process for graphs with collectives (parallel::TrainingStep: Note [Capturing across processes]).
//
// Failure handling (Note [A distributed job never hangs] in comm/src/process/watchdog.h): every collective and
// barrier has a deadline (options.timeout); a watchdog ends the whole job with a message naming the rank and the
// collective when one does not finish in time, or when NCCL reports an asynchronous error. abort() ends every
// process of the job; an exception that escapes on one rank (std::terminate) does the same. On CPU devices each of
// these messages ends with a desync report: where every process is in the group's numbered sequence of collectives,
// naming the first mismatch or the process that lags (Note [Desync reports] in comm/src/process/collective_progress.h).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/comm/comm.h"
#include "tandem/core/device.h"
#include "tandem/core/stream_marker.h"
#include "tandem/core/tensor.h"

namespace tandem::comm {

enum class ReduceOp {
  Sum,      // the elementwise sum over every device of every process
  Average,  // the sum divided by the number of PROCESSES (size()), as PyTorch's DDP averages over its ranks
};

// How this process was started, read from the environment (LaunchInfo::from_environment).
struct LaunchInfo {
  enum class Channel {
    None,  // no launcher: a group of one process
    Mpi,   // an MPI launcher (mpirun, srun, mpiexec)
    File,  // torchrun-style variables with TANDEM_INIT_METHOD=file:///path
  };
  Channel channel = Channel::None;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string rendezvous_path;  // Channel::File: the path of TANDEM_INIT_METHOD
  // Channel::File: what tells this job's processes from another job's on the same path (Note [File rendezvous] in
  // comm/src/process/file_channel.cpp): TANDEM_JOB_ID, else torchrun's TORCHELASTIC_RUN_ID (unless "none"), else
  // "MASTER_ADDR:MASTER_PORT" when both are set; empty when none is. Letters, digits and ".:_-", at most 128.
  std::string job_id;

  // Errors: variables that are not decimal integers or out of range (rank >= size, local_rank >= local_size,
  // size < 1 or above kMaxProcesses); torchrun-style variables without TANDEM_INIT_METHOD when WORLD_SIZE > 1; an init
  // method that is not file:///absolute/path; a job id with other characters or longer. The message names the variable
  // and quotes its value.
  static LaunchInfo from_environment();
  // The most processes of one job: far above any machine count tandem is for, and a bound on what a rank allocates
  // for the others (a WORLD_SIZE of 2^31 - 1 is an Error, not a failed allocation).
  static constexpr int kMaxProcesses = 1 << 16;
};

struct ProcessGroupOptions {
  // A collective or barrier that has not finished this long after it was issued ends the job (every rank) with a
  // message. Also bounds the rendezvous at creation. Must be positive.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
};

// The part of a started all_reduce still to be joined; as comm::AllReduceWork (it is one).
using GroupWork = AllReduceWork;

class ProcessGroup {
 public:
  // The group of every process of the job, as the environment describes it (LaunchInfo::from_environment), each
  // process driving `devices` (this process's devices; every process must give the same number). Collective: every
  // process of the job calls it. A group of one process needs no launcher.
  // Errors: those of LaunchInfo; no devices or a device listed twice or missing; processes that give different
  // numbers of devices or mix CPU and CUDA devices; a rendezvous that does not complete within options.timeout;
  // a second group created while one is alive in this process (MPI and the host channel are per process).
  static std::shared_ptr<ProcessGroup> from_environment(std::vector<Device> devices, ProcessGroupOptions options = {});
  // A group of this process alone (size 1), whatever the environment says.
  static std::shared_ptr<ProcessGroup> single(std::vector<Device> devices, ProcessGroupOptions options = {});

  // No collective barrier on MPI (MPI, once started, is finalized at process exit); on the file rendezvous rank 0
  // waits, up to options.timeout, until every rank has left, so that it can remove the rendezvous directory.
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return info_.rank; }
  int size() const { return info_.size; }
  int local_rank() const { return info_.local_rank; }
  int local_size() const { return info_.local_size; }
  const LaunchInfo& launch() const { return info_; }
  const std::vector<Device>& devices() const { return devices_; }  // this process's devices
  size_t world_devices() const { return devices_.size() * static_cast<size_t>(info_.size); }
  const ProcessGroupOptions& options() const { return options_; }

  // In place: every tensors[i] becomes the reduction (op) over every device of every process.
  // Errors (before anything is sent): tensors.size() != devices().size(); tensors[i] undefined, not on
  // devices()[i], not contiguous or not float32; shapes that differ between this process's tensors.
  void all_reduce(std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::Sum);
  // all_reduce started after ready[i] on each device, overlapping later work until the returned work is joined
  // (as comm::all_reduce_async; on CPU devices it completes here). Same errors, and ready.size() != tensors.size()
  // or a marker on another device.
  GroupWork all_reduce_async(std::vector<Tensor>& tensors, const std::vector<StreamMarker>& ready,
                             ReduceOp op = ReduceOp::Sum);
  // Every tensors[i] becomes the tensor that process `root` holds on its first device.
  // Errors: as all_reduce; root outside [0, size()).
  void broadcast(std::vector<Tensor>& tensors, int root = 0);
  // Returns one tensor per local device: the concatenation along dim 0 of every device's tensor, in global device
  // order (process 0's devices first). Errors: as all_reduce; a 0-dim tensor.
  std::vector<Tensor> all_gather(const std::vector<Tensor>& tensors);
  // Each tensors[i] has world_devices() * n rows (dim 0); returns one tensor per local device: the reduction over
  // every device of chunk g (n rows), where g is the global rank of that device. Errors: as all_reduce; dim 0 not
  // divisible by world_devices().
  std::vector<Tensor> reduce_scatter(const std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::Sum);
  // reduce_scatter without new outputs: each device's result lands in its own chunk of its tensor, which is returned
  // as a view (tensors[i].narrow(0, g * n, n)), and the rest of each tensor holds unspecified values afterwards (on CPU
  // devices the whole reduction, on CUDA devices the local values). For inputs that are dropped after the reduction
  // (ZeRO stage 2's staged buckets). Errors: as reduce_scatter.
  std::vector<Tensor> reduce_scatter_in_place(std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::Sum);
  // Returns once every process has called it (and the work issued on this process's devices before it is done).
  void barrier();

  // Every process's `value`, in rank order, exchanged on the host through the group's channel (MPI or the rendezvous
  // files; no device work, no wait for the devices): for decisions that every process must take alike from facts
  // that each knows alone (parallel::TrainingStep: whether a step is replayed, captured or run eagerly, Note
  // [Capturing across processes] in training_step.h). Collective, bounded by options.timeout like a barrier: when a
  // process does not take part in time, the job ends with "<what> did not finish within ...".
  std::vector<uint64_t> exchange(uint64_t value, std::string_view what);
  // The same for a text of any length up to kMaxExchangedText bytes (each process's own): every process's `mine`,
  // in rank order (setups compared at start-up, trainers::check_same_setup). Errors: a longer text (on that process;
  // the others then wait until the timeout ends the job).
  static constexpr size_t kMaxExchangedText = size_t{1} << 24;
  std::vector<std::string> exchange_text(std::string_view mine, std::string_view what);
  // Hands the device work issued so far on this process's devices' compute streams to the group's watchdog as one
  // launch named `name`, in the sequence of the group's collectives and with their deadline (options.timeout): for
  // work that runs collectives of this group without issuing them through it, a replay of a CUDA graph that captured
  // them (parallel::TrainingStep calls it right after each replay's launch). A collective issued while its streams
  // are being captured is recorded into the graph and watched only through such calls (Note [Collectives inside a
  // graph capture] in comm/src/cuda/group_collectives.cpp). When the work does not finish in time (a peer stopped
  // replaying, or died), the job ends with "comm: rank R: <name> #<n> did not finish within T ms". `name` must be a
  // string literal (the watchdog's thread reads it later). Nothing to do on CPU devices, whose collectives are done
  // when they return. Errors: this process's compute streams being captured now.
  void watch_replay(const char* name);

  // Ends every process of the job now, with `why` on stderr naming this rank; exit status 1. Never returns.
  [[noreturn]] void abort(std::string_view why);

  // The host channel, device collectives and watchdog behind a group (comm/src/process/process_group_impl.h).
  class Impl;
  ProcessGroup(LaunchInfo info, std::vector<Device> devices, ProcessGroupOptions options);  // use the factories

 private:
  LaunchInfo info_;
  std::vector<Device> devices_;
  ProcessGroupOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::comm

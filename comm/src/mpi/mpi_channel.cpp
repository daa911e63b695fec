// The host channel over (a duplicate of) MPI_COMM_WORLD, for processes started by an MPI launcher (mpirun, srun,
// mpiexec).
//
// Note [MPI lives as long as the process]: MPI may be initialized once per process; after MPI_Finalize it cannot
// be initialized again. So the first channel initializes MPI (unless the program did) and MPI is finalized at
// process exit (std::atexit), not when a channel goes: a process may create and destroy groups one after another
// (a test program does). A program that initialized MPI itself finalizes it itself. After MPI_Abort nothing is
// finalized: the launcher ends every process.
//
// Note [The channel's communicator]: the channel runs on a duplicate of MPI_COMM_WORLD of its own, made with it, so
// that its messages never meet the program's own on MPI_COMM_WORLD, and with MPI_ERRORS_RETURN, so that an MPI error
// in a collective (a message truncated: processes that called the same collective with other sizes) is an Error that
// names the call, which ends the job through the group's abort (its desync report included), instead of MPI's
// default of ending the job with MPI's message alone. MPI_Abort still ends every process of MPI_COMM_WORLD.
//
// Note [Progress over MPI]: the desync report (Note [Desync reports] in process/collective_progress.h) must reach
// processes whose main thread is blocked in a collective, or anywhere else. So once the group asks for it
// (answer_progress), a thread of the channel probes the channel's communicator for point-to-point requests every
// 20 ms (MPI never matches them with the collectives on the same communicator) and answers each with this process's
// RankProgress. gather_progress sends an empty request to every other process with nonblocking calls and waits for
// their answers until its wait is over; requests still open then are left behind, since the process aborts next.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "process/host_channel.h"
#include "tandem/core/error.h"

namespace tandem::comm::detail {
namespace {

constexpr const char* kFn = "ProcessGroup::from_environment";

void check_mpi(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(status, text, &length);
  TANDEM_FAIL("comm: ", call, " failed: ", std::string(text, static_cast<size_t>(length)));
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// Initializes MPI once per process (Note [MPI lives as long as the process]).
void initialize_mpi() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
    int provided = 0;
    if (initialized) {
      check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
    } else {
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
      std::atexit(finalize_at_exit);
    }
    // The watchdog calls MPI_Abort while another thread may be blocked in a collective.
    TANDEM_CHECK(provided == MPI_THREAD_MULTIPLE, kFn, ": MPI provides thread level ", provided,
                 " but expected MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")");
  });
  int finalized = 0;
  check_mpi(MPI_Finalized(&finalized), "MPI_Finalized");
  TANDEM_CHECK(!finalized, kFn, ": MPI was finalized already (it cannot start again in this process)");
}

// MPI counts are ints: larger buffers go in pieces of at most this many elements.
constexpr size_t kMaxPiece = size_t{1} << 30;

// The tags of Note [Progress over MPI], on the channel's own communicator.
constexpr int kProgressRequestTag = 1;
constexpr int kProgressAnswerTag = 2;

class MpiChannel final : public HostChannel {
 public:
  explicit MpiChannel(const LaunchInfo& info) {
    initialize_mpi();
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    // info.size 0: the launcher left the size to MPI (PMIx), and only the rank can be compared.
    TANDEM_CHECK((info.size == 0 || size_ == info.size) && rank_ == info.rank, kFn,
                 ": the launcher's variables say rank ", info.rank,
                 info.size == 0 ? std::string() : " of " + std::to_string(info.size), " but MPI_COMM_WORLD has rank ",
                 rank_, " of ", size_, " (expected the same; was the program started by this MPI's launcher?)");
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");  // Note [The channel's communicator]
    check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  ~MpiChannel() override;
  MpiChannel(const MpiChannel&) = delete;
  MpiChannel& operator=(const MpiChannel&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::byte> all_gather(std::span<const std::byte> mine) override {
    TANDEM_CHECK(mine.size() <= static_cast<size_t>(INT_MAX), "comm: all_gather of ", mine.size(),
                 " bytes per process but expected at most ", INT_MAX, " (MPI_Allgather's count)");
    std::vector<std::byte> all(mine.size() * static_cast<size_t>(size_));
    check_mpi(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(),
                            static_cast<int>(mine.size()), MPI_BYTE, comm_),
              "MPI_Allgather");
    return all;
  }

  void broadcast(std::span<std::byte> data, int root) override {
    for (size_t at = 0; at < data.size(); at += kMaxPiece) {
      const size_t count = std::min(kMaxPiece, data.size() - at);
      check_mpi(MPI_Bcast(data.data() + at, static_cast<int>(count), MPI_BYTE, root, comm_), "MPI_Bcast");
    }
  }

  // Note [Identical sums]: MPI_Allreduce need not give every process the same bits (the standard only advises it),
  // so the sum is made once, on process 0, and broadcast: every process gets those bits.
  void all_reduce_sum(std::span<float> data) override {
    for (size_t at = 0; at < data.size(); at += kMaxPiece) {
      const int count = static_cast<int>(std::min(kMaxPiece, data.size() - at));
      float* piece = data.data() + at;
      check_mpi(MPI_Reduce(rank_ == 0 ? MPI_IN_PLACE : piece, piece, count, MPI_FLOAT, MPI_SUM, 0, comm_),
                "MPI_Reduce");
      check_mpi(MPI_Bcast(piece, count, MPI_FLOAT, 0, comm_), "MPI_Bcast");
    }
  }

  void barrier() override { check_mpi(MPI_Barrier(comm_), "MPI_Barrier"); }

  void answer_progress(const CollectiveProgress& progress) override {
    progress_ = &progress;
    answerer_ = std::thread([this] { answer_requests(); });
  }

  // Note [Progress over MPI].
  std::vector<std::optional<RankProgress>> gather_progress(const RankProgress& mine,
                                                           std::chrono::milliseconds wait) override {
    std::vector<std::optional<RankProgress>> ranks(static_cast<size_t>(size_));
    ranks[rank_] = mine;
    std::vector<RankProgress> answers(static_cast<size_t>(size_));
    std::vector<MPI_Request> receives(static_cast<size_t>(size_), MPI_REQUEST_NULL);
    std::vector<MPI_Request> requests(static_cast<size_t>(size_), MPI_REQUEST_NULL);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Irecv(&answers[r], sizeof(RankProgress), MPI_BYTE, r, kProgressAnswerTag, comm_, &receives[r]);
      MPI_Isend(nullptr, 0, MPI_BYTE, r, kProgressRequestTag, comm_, &requests[r]);
    }
    const auto deadline = std::chrono::steady_clock::now() + wait;
    for (int missing = size_ - 1; missing > 0 && std::chrono::steady_clock::now() < deadline;) {
      for (int r = 0; r < size_; ++r) {
        int arrived = 0;
        if (receives[r] == MPI_REQUEST_NULL || MPI_Test(&receives[r], &arrived, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
            !arrived) {
          continue;
        }
        ranks[r] = answers[r];
        --missing;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return ranks;
  }

  [[noreturn]] void abort(std::string_view message) override {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(message.size()), message.data());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // MPI_Abort does not return; should it, this process still ends
  }

 private:
  // The thread of Note [Progress over MPI].
  void answer_requests() {
    std::unique_lock lock(answerer_mutex_);
    while (!answerer_wake_.wait_for(lock, std::chrono::milliseconds(20), [this] { return answerer_stopping_; })) {
      for (;;) {
        int pending = 0;
        MPI_Status status;
        if (MPI_Iprobe(MPI_ANY_SOURCE, kProgressRequestTag, comm_, &pending, &status) != MPI_SUCCESS || !pending) {
          break;
        }
        MPI_Recv(nullptr, 0, MPI_BYTE, status.MPI_SOURCE, kProgressRequestTag, comm_, MPI_STATUS_IGNORE);
        const RankProgress mine = progress_->snapshot();
        MPI_Send(&mine, sizeof(RankProgress), MPI_BYTE, status.MPI_SOURCE, kProgressAnswerTag, comm_);
      }
    }
  }

  int rank_ = 0;
  int size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;  // Note [The channel's communicator]
  const CollectiveProgress* progress_ = nullptr;
  std::mutex answerer_mutex_;
  std::condition_variable answerer_wake_;
  bool answerer_stopping_ = false;
  std::thread answerer_;
};

MpiChannel::~MpiChannel() {
  if (answerer_.joinable()) {
    {
      std::lock_guard lock(answerer_mutex_);
      answerer_stopping_ = true;
    }
    answerer_wake_.notify_all();
    answerer_.join();
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

}  // namespace

std::unique_ptr<HostChannel> make_mpi_channel(const LaunchInfo& info) { return std::make_unique<MpiChannel>(info); }

}  // namespace tandem::comm::detail

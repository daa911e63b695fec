// The host channel over MPI_COMM_WORLD, for processes started by an MPI launcher (mpirun, srun, mpiexec).
//
// Note [MPI lives as long as the process]: MPI may be initialized once per process; after MPI_Finalize it cannot
// be initialized again. So the first channel initializes MPI (unless the program did) and MPI is finalized at
// process exit (std::atexit), not when a channel goes: a process may create and destroy groups one after another
// (a test program does). A program that initialized MPI itself finalizes it itself. After MPI_Abort nothing is
// finalized: the launcher ends every process.

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

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
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::byte> all_gather(std::span<const std::byte> mine) override {
    TANDEM_CHECK(mine.size() <= static_cast<size_t>(INT_MAX), "comm: all_gather of ", mine.size(),
                 " bytes per process but expected at most ", INT_MAX, " (MPI_Allgather's count)");
    std::vector<std::byte> all(mine.size() * static_cast<size_t>(size_));
    check_mpi(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(),
                            static_cast<int>(mine.size()), MPI_BYTE, MPI_COMM_WORLD),
              "MPI_Allgather");
    return all;
  }

  void broadcast(std::span<std::byte> data, int root) override {
    for (size_t at = 0; at < data.size(); at += kMaxPiece) {
      const size_t count = std::min(kMaxPiece, data.size() - at);
      check_mpi(MPI_Bcast(data.data() + at, static_cast<int>(count), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    }
  }

  // Note [Identical sums]: MPI_Allreduce need not give every process the same bits (the standard only advises it),
  // so the sum is made once, on process 0, and broadcast: every process gets those bits.
  void all_reduce_sum(std::span<float> data) override {
    for (size_t at = 0; at < data.size(); at += kMaxPiece) {
      const int count = static_cast<int>(std::min(kMaxPiece, data.size() - at));
      float* piece = data.data() + at;
      check_mpi(MPI_Reduce(rank_ == 0 ? MPI_IN_PLACE : piece, piece, count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD),
                "MPI_Reduce");
      check_mpi(MPI_Bcast(piece, count, MPI_FLOAT, 0, MPI_COMM_WORLD), "MPI_Bcast");
    }
  }

  void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  [[noreturn]] void abort(std::string_view message) override {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(message.size()), message.data());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // MPI_Abort does not return; should it, this process still ends
  }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<HostChannel> make_mpi_channel(const LaunchInfo& info) { return std::make_unique<MpiChannel>(info); }

}  // namespace tandem::comm::detail

// nccl_mpi_allreduce: all_reduce across processes, raw NCCL beside tandem's process group in the same run, at 4 KB,
// 1 MB, 64 MB and 256 MB; rank 0 prints a markdown table. One process per GPU, the GPU of its local rank:
//
//   mpirun -np 2 nccl_mpi_allreduce [--samples S] [--iterations K] [--warmup W] [--markdown PATH]
//
// Raw: rank 0's NCCL unique id sent with MPI_Bcast, ncclCommInitRank, then ncclAllReduce (sum, in place) on a stream
// of its own over a cudaMalloc buffer. tandem: comm::ProcessGroup::from_environment({cuda:<local rank>}) and
// group->all_reduce (sum) on a tensor of the same size; the group also brings up MPI, which the raw side then uses.
//
// Method: CUDA events. After W warm-up calls, each of S samples waits for the GPU, meets the other ranks at an
// MPI_Barrier, and times K back-to-back calls between two events on the stream where the results land (raw: its NCCL
// stream; tandem: the device's compute stream, which each call joins); time per call = elapsed / K. The median over
// the samples is reported (each rank times its own GPU; rank 0's figures are printed). With --iterations 1 each call
// is timed alone, so the host's cost of issuing it counts in full; with more, it counts only where it exceeds the
// GPU's time per call. Beside it, the host time per call: the host clock around the same K calls (issuing them,
// without waiting for the GPU), divided by K, median over the samples.

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <tandem/tandem.h>

#include <cstdio>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_support.h"
#include "tandem/comm/process_group.h"
#include "tandem/core/cuda/context.h"

namespace {

namespace bench = tandem::bench;

struct Options {
  int samples = 30;
  int iterations = 20;
  int warmup = 10;
  std::string markdown;
};

Options parse(int argc, char** argv) {
  Options options;
  bench::parse_flags(
      argc, argv, "nccl_mpi_allreduce",
      "usage: mpirun -np 2 nccl_mpi_allreduce [--samples S] [--iterations K] [--warmup W] "
      "[--markdown PATH]",
      {bench::int_flag("--samples", options.samples, 1, 1'000'000),
       bench::int_flag("--iterations", options.iterations, 1, 1'000'000),
       bench::int_flag("--warmup", options.warmup, 0, 1'000'000), bench::text_flag("--markdown", options.markdown)});
  return options;
}

using bench::check;
void check(int mpi_status, const char* what) {
  TANDEM_CHECK(mpi_status == MPI_SUCCESS, what, " failed with MPI error ", mpi_status);
}

struct Timing {
  double device_us;  // per call, CUDA events
  double host_us;    // per call, the host's time to issue it
};

// Medians over the samples of the time per call in microseconds (see the method at the top of the file).
Timing time_us(const std::function<void()>& call, cudaStream_t stream, const Options& options) {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < options.warmup; ++i) call();
  std::vector<double> per_call;
  std::vector<double> host_per_call;
  for (int s = 0; s < options.samples; ++s) {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    const double issue_ms = bench::host_ms([&] {
      for (int i = 0; i < options.iterations; ++i) call();
    });
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    host_per_call.push_back(1e3 * issue_ms / options.iterations);
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    per_call.push_back(1e3 * static_cast<double>(ms) / options.iterations);
  }
  check(cudaEventDestroy(start), "cudaEventDestroy");
  check(cudaEventDestroy(stop), "cudaEventDestroy");
  return {bench::median(per_call), bench::median(host_per_call)};
}

// The raw side: one NCCL communicator over the processes' GPUs, bootstrapped through MPI, and a stream of its own.
class RawNccl {
 public:
  RawNccl(int rank, int size, int device) : device_(device) {
    ncclUniqueId id{};
    if (rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    check(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
    check(cudaSetDevice(device), "cudaSetDevice");
    check(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~RawNccl() {
    (void)cudaSetDevice(device_);
    (void)cudaDeviceSynchronize();
    (void)ncclCommDestroy(comm_);
    (void)cudaStreamDestroy(stream_);
  }
  RawNccl(const RawNccl&) = delete;
  RawNccl& operator=(const RawNccl&) = delete;

  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }

 private:
  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

struct Row {
  size_t bytes;
  Timing raw;
  Timing tandem;
};

std::string markdown_table(const std::vector<Row>& rows, int processes, const Options& options) {
  std::ostringstream os;
  os << "all_reduce (sum, float32, in place) across " << processes << " processes, one " << bench::gpu_name(0)
     << " each, NCCL " << bench::nccl_version() << ": raw ncclAllReduce (MPI_Bcast bootstrap) vs tandem ProcessGroup::"
     << "all_reduce. Time per call: CUDA events around " << options.iterations << " back-to-back calls, median of "
     << options.samples << " samples after " << options.warmup << " warm-up calls; rank 0's GPU. Host us: the "
     << "host's time to issue one call (median per call over the samples).\n\n";
  os << "| size | raw NCCL us | tandem us | difference us | ratio | raw host us | tandem host us |\n"
     << "|---|---|---|---|---|---|---|\n";
  for (const Row& row : rows) {
    os << bench::formatted("| %s | %.1f | %.1f | %+.1f | %.3f | %.2f | %.2f |\n", bench::size_label(row.bytes).c_str(),
                           row.raw.device_us, row.tandem.device_us, row.tandem.device_us - row.raw.device_us,
                           row.tandem.device_us / row.raw.device_us, row.raw.host_us, row.tandem.host_us);
  }
  return os.str();
}

int run(const Options& options) {
  const tandem::comm::LaunchInfo launch = tandem::comm::LaunchInfo::from_environment();
  if (launch.channel != tandem::comm::LaunchInfo::Channel::Mpi) {
    std::cout << "nccl_mpi_allreduce: needs an MPI launcher (mpirun -np 2 nccl_mpi_allreduce); nothing to measure\n";
    return 0;
  }
  const int visible = tandem::cuda_device_count();
  if (visible < launch.local_size) {
    std::cout << "nccl_mpi_allreduce: needs one GPU per process of this machine (" << launch.local_size << "), "
              << visible << " visible; nothing to measure\n";
    return 0;
  }
  if (launch.rank == 0 && !options.markdown.empty()) tandem::check_writable(options.markdown, "--markdown");

  const tandem::Device device = tandem::Device::cuda(launch.local_rank);
  auto group = tandem::comm::ProcessGroup::from_environment({device});
  if (group->size() < 2) {
    std::cout << "nccl_mpi_allreduce: needs at least 2 processes (mpirun -np 2); nothing to measure\n";
    return 0;
  }
  std::vector<Row> rows;
  {
    RawNccl raw(group->rank(), group->size(), device.index());
    const cudaStream_t compute = tandem::cuda::compute_stream(device.index());
    for (size_t bytes : {size_t{4} << 10, size_t{1} << 20, size_t{64} << 20, size_t{256} << 20}) {
      const size_t count = bytes / sizeof(float);
      float* buffer = nullptr;
      check(cudaMalloc(&buffer, bytes), "cudaMalloc");
      check(cudaMemset(buffer, 0, bytes), "cudaMemset");
      std::vector<tandem::Tensor> tensors = {tandem::Tensor::zeros({static_cast<int64_t>(count)}, device)};
      const Timing raw_time = time_us(
          [&] {
            check(ncclAllReduce(buffer, buffer, count, ncclFloat, ncclSum, raw.comm(), raw.stream()), "ncclAllReduce");
          },
          raw.stream(), options);
      const Timing tandem_time =
          time_us([&] { group->all_reduce(tensors, tandem::comm::ReduceOp::Sum); }, compute, options);
      check(cudaFree(buffer), "cudaFree");
      rows.push_back({bytes, raw_time, tandem_time});
      if (group->rank() == 0) {
        std::fprintf(stderr, "  all_reduce %7s  raw %10.1f us (host %.2f)  tandem %10.1f us (host %.2f)\n",
                     bench::size_label(bytes).c_str(), raw_time.device_us, raw_time.host_us, tandem_time.device_us,
                     tandem_time.host_us);
      }
    }
  }
  if (group->rank() == 0) {
    const std::string table = markdown_table(rows, group->size(), options);
    std::cout << table;
    if (!options.markdown.empty()) tandem::write_file_atomically(options.markdown, table, "--markdown");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::cerr << "nccl_mpi_allreduce: " << e.what() << "\n";
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);  // the other ranks would wait for this one
    return 1;
  }
}

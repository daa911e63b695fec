// comm_bench: times every tandem::comm function on the GPUs of this machine beside the raw operation it is built
// on (NCCL collectives on communicators of its own, or cudaMemcpyPeerAsync), on buffers of the same sizes, and
// prints a markdown table.
//
// Method: host wall clock. Every GPU is synchronized (cudaDeviceSynchronize), `iterations` calls are issued back
// to back, every GPU is synchronized again; the time per call is the elapsed time divided by `iterations`. This
// is repeated `samples` times after a warm-up and the median is reported. The same method times tandem and the
// raw baseline, their samples taken in turn (one tandem sample, one raw, ...) so that the machine's speed drifting
// during the run weighs on both alike, and per-call host overhead (argument checks, allocation of the outputs from the caching allocator,
// event waits) counts against tandem exactly as it would in a program. Each row shows tandem - raw and tandem/raw,
// and, where tandem sets itself a goal for that op and size (goal_for), whether this run met it.
//
//   comm_bench [--gpus N | --devices N] [--samples S] [--iterations K] [--markdown PATH]

#include <tandem/tandem.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_support.h"

namespace {

namespace bench = tandem::bench;

struct Options {
  int gpus = 2;
  int samples = 15;
  int iterations = 10;
  int warmup = 5;
  std::string markdown;
};

Options parse(int argc, char** argv) {
  Options options;
  bench::parse_flags(
      argc, argv, "comm_bench",
      "usage: comm_bench [--gpus N | --devices N] [--samples S] [--iterations K] [--markdown PATH]",
      {bench::int_flag("--gpus", options.gpus, 2, 1024), bench::int_flag("--devices", options.gpus, 2, 1024),
       bench::int_flag("--samples", options.samples, 1, 1'000'000),
       bench::int_flag("--iterations", options.iterations, 1, 1'000'000),
       bench::text_flag("--markdown", options.markdown)});
  return options;
}

}  // namespace

#if TANDEM_WITH_CUDA

namespace {

using tandem::Device;
using tandem::Tensor;

using bench::check;

// What the raw baselines run on: NCCL communicators and streams of their own, and plain cudaMalloc buffers.
class Raw {
 public:
  explicit Raw(int gpus) : gpus_(gpus), comms_(static_cast<size_t>(gpus)), streams_(static_cast<size_t>(gpus)) {
    std::vector<int> devices(static_cast<size_t>(gpus));
    for (int d = 0; d < gpus; ++d) devices[static_cast<size_t>(d)] = d;
    check(ncclCommInitAll(comms_.data(), gpus, devices.data()), "ncclCommInitAll");
    for (int d = 0; d < gpus; ++d) {
      check(cudaSetDevice(d), "cudaSetDevice");
      check(cudaStreamCreateWithFlags(&streams_[static_cast<size_t>(d)], cudaStreamNonBlocking), "cudaStreamCreate");
      for (int peer = 0; peer < gpus; ++peer) {
        int can_access = 0;
        check(cudaDeviceCanAccessPeer(&can_access, d, peer), "cudaDeviceCanAccessPeer");
        if (peer == d || can_access == 0) continue;
        if (cudaDeviceEnablePeerAccess(peer, 0) != cudaSuccess) (void)cudaGetLastError();  // already enabled
      }
    }
  }
  ~Raw() {
    for (int d = 0; d < gpus_; ++d) {  // a destructor must not throw: errors here are left unchecked
      (void)cudaSetDevice(d);
      (void)cudaDeviceSynchronize();
    }
    for (float* buffer : buffers_) (void)cudaFree(buffer);
    for (cudaStream_t stream : streams_) (void)cudaStreamDestroy(stream);
    for (ncclComm_t comm : comms_) (void)ncclCommDestroy(comm);
  }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;

  float* buffer(int device, size_t count) {
    check(cudaSetDevice(device), "cudaSetDevice");
    float* buffer = nullptr;
    check(cudaMalloc(&buffer, std::max<size_t>(count, 1) * sizeof(float)), "cudaMalloc");
    check(cudaMemset(buffer, 0, count * sizeof(float)), "cudaMemset");
    buffers_.push_back(buffer);
    return buffer;
  }

  // One NCCL group with issue(device, comm, stream) for every device.
  template <typename Issue>
  void group(Issue&& issue) {
    check(ncclGroupStart(), "ncclGroupStart");
    for (int d = 0; d < gpus_; ++d) issue(d, comms_[static_cast<size_t>(d)], streams_[static_cast<size_t>(d)]);
    check(ncclGroupEnd(), "ncclGroupEnd");
  }

  void peer_copy(float* dst, int dst_device, const float* src, int src_device, size_t count, int stream_device) {
    check(cudaSetDevice(stream_device), "cudaSetDevice");
    check(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, count * sizeof(float),
                              streams_[static_cast<size_t>(stream_device)]),
          "cudaMemcpyPeerAsync");
  }

 private:
  int gpus_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
  std::vector<float*> buffers_;
};

struct Row {
  std::string op;
  std::string raw_op;
  size_t bytes;
  double tandem_us;
  double raw_us;
};

// The goals for tandem's overhead over the raw operation: at most `extra_us` more per call, or at most `ratio` times
// the raw time (whichever is set; a row without a goal has neither).
struct Goal {
  double extra_us = 0.0;
  double ratio = 0.0;
};

// Small messages are dominated by per-call cost: the collectives within 1.5 us of raw NCCL at 4 KiB, scatter and
// gather within 2 us of raw peer copies at 4 KiB and 1 MiB. Large coalesced calls are bandwidth-bound: within 5% of
// one raw collective of the same bytes at 64 MiB.
std::optional<Goal> goal_for(const std::string& op, size_t bytes) {
  const bool small = bytes == (size_t{4} << 10);
  if (small && (op == "broadcast" || op == "reduce_add" || op == "all_reduce")) return Goal{.extra_us = 1.5};
  if ((small || bytes == (size_t{1} << 20)) && (op == "scatter" || op == "gather")) return Goal{.extra_us = 2.0};
  if (bytes == (size_t{64} << 20) && (op == "broadcast_coalesced" || op == "reduce_add_coalesced")) {
    return Goal{.ratio = 1.05};
  }
  return std::nullopt;
}

// "<= +1.5 us" or "<= 1.05x", and whether the row meets it; "-" for a row without a goal.
std::pair<std::string, std::string> judged(const Row& row) {
  const std::optional<Goal> goal = goal_for(row.op, row.bytes);
  if (!goal) return {"-", "-"};
  if (goal->extra_us > 0.0) {
    return {bench::formatted("<= +%.1f us", goal->extra_us),
            row.tandem_us - row.raw_us <= goal->extra_us ? "met" : "missed"};
  }
  return {bench::formatted("<= %.2fx", goal->ratio), row.tandem_us <= goal->ratio * row.raw_us ? "met" : "missed"};
}

// `parts` pieces of `count` elements as chunk sizes (the first ones one larger when it does not divide).
std::vector<int64_t> split_sizes(size_t count, int parts) {
  std::vector<int64_t> sizes;
  for (int p = 0; p < parts; ++p) {
    sizes.push_back(static_cast<int64_t>(count / parts + (static_cast<size_t>(p) < count % parts ? 1 : 0)));
  }
  return sizes;
}

// Times every op at one size; appends one row per op.
void bench_size(size_t bytes, int gpus, Raw& raw, const Options& options, std::vector<Row>& rows) {
  const size_t count = bytes / sizeof(float);
  const int64_t n = static_cast<int64_t>(count);
  std::vector<Device> devices;
  for (int d = 0; d < gpus; ++d) devices.push_back(Device::cuda(d));
  // Median microseconds per call (see the method at the top of the file).
  const bench::Sampling sampling{
      .warmup = options.warmup, .samples = options.samples, .iterations = options.iterations};

  // tandem inputs: one tensor per device, four quarter-size tensors per device for the coalesced variants, and
  // one part per device for gather.
  std::vector<Tensor> full;
  std::vector<std::vector<Tensor>> quarters;
  std::vector<Tensor> parts;
  const std::vector<int64_t> part_sizes = split_sizes(count, gpus);
  const std::vector<int64_t> quarter_sizes = split_sizes(count, 4);
  for (int d = 0; d < gpus; ++d) {
    full.push_back(Tensor::ones({n}, devices[static_cast<size_t>(d)]));
    quarters.emplace_back();
    for (int64_t q : quarter_sizes) quarters.back().push_back(Tensor::ones({q}, devices[static_cast<size_t>(d)]));
    parts.push_back(Tensor::ones({part_sizes[static_cast<size_t>(d)]}, devices[static_cast<size_t>(d)]));
  }

  // raw buffers of the same sizes: send and receive per device; a gather output on device 0
  std::vector<float*> send;
  std::vector<float*> recv;
  for (int d = 0; d < gpus; ++d) {
    send.push_back(raw.buffer(d, count));
    recv.push_back(raw.buffer(d, count));
  }
  const auto raw_broadcast = [&] {
    raw.group([&](int d, ncclComm_t comm, cudaStream_t stream) {
      check(ncclBroadcast(send[d], send[d], count, ncclFloat, 0, comm, stream), "ncclBroadcast");
    });
  };
  const auto raw_reduce = [&] {
    raw.group([&](int d, ncclComm_t comm, cudaStream_t stream) {
      check(ncclReduce(send[d], recv[d], count, ncclFloat, ncclSum, 0, comm, stream), "ncclReduce");
    });
  };
  const auto raw_all_reduce = [&] {
    raw.group([&](int d, ncclComm_t comm, cudaStream_t stream) {
      check(ncclAllReduce(send[d], send[d], count, ncclFloat, ncclSum, comm, stream), "ncclAllReduce");
    });
  };
  // scatter: chunk d of device 0's buffer to device d (d > 0), each copy on its destination's stream
  const auto raw_scatter = [&] {
    size_t offset = static_cast<size_t>(part_sizes[0]);
    for (int d = 1; d < gpus; ++d) {
      raw.peer_copy(recv[d], d, send[0] + offset, 0, static_cast<size_t>(part_sizes[d]), d);
      offset += static_cast<size_t>(part_sizes[d]);
    }
  };
  // gather: part d into its slice of device 0's output, each copy on its source's stream (the local one included)
  const auto raw_gather = [&] {
    size_t offset = 0;
    for (int d = 0; d < gpus; ++d) {
      raw.peer_copy(recv[0] + offset, 0, send[d], d, static_cast<size_t>(part_sizes[d]), d);
      offset += static_cast<size_t>(part_sizes[d]);
    }
  };

  // Times the tandem call and the raw one with their samples in turn, and appends the row.
  const auto add = [&](const std::string& op, const std::string& raw_op, const std::function<void()>& tandem_call,
                       const std::function<void()>& raw_call) {
    const auto [tandem_ms, raw_ms] = bench::alternating_median_ms_per_call(devices, sampling, tandem_call, raw_call);
    const double tandem_us = 1e3 * tandem_ms;
    const double raw_us = 1e3 * raw_ms;
    rows.push_back({op, raw_op, bytes, tandem_us, raw_us});
    std::fprintf(stderr, "  %-22s %7s  tandem %10.1f us  raw %10.1f us  %+8.1f us  %6.3fx  %s\n", op.c_str(),
                 bench::size_label(bytes).c_str(), tandem_us, raw_us, tandem_us - raw_us, tandem_us / raw_us,
                 judged(rows.back()).second.c_str());
  };
  add("broadcast", "ncclBroadcast", [&] { tandem::comm::broadcast(full[0], devices); }, raw_broadcast);
  add("reduce_add", "ncclReduce", [&] { tandem::comm::reduce_add(full, devices[0]); }, raw_reduce);
  add("all_reduce", "ncclAllReduce", [&] { tandem::comm::all_reduce(full); }, raw_all_reduce);
  add("broadcast_coalesced", "ncclBroadcast", [&] { tandem::comm::broadcast_coalesced(quarters[0], devices); },
      raw_broadcast);
  add("reduce_add_coalesced", "ncclReduce", [&] { tandem::comm::reduce_add_coalesced(quarters, devices[0]); },
      raw_reduce);
  add("scatter", "cudaMemcpyPeerAsync", [&] { tandem::comm::scatter(full[0], devices, part_sizes); }, raw_scatter);
  add("gather", "cudaMemcpyPeerAsync", [&] { tandem::comm::gather(parts, 0, devices[0]); }, raw_gather);
}

std::string markdown_table(const std::vector<Row>& rows, int gpus, const Options& options) {
  std::ostringstream os;
  os << "tandem::comm vs raw NCCL / cudaMemcpyPeerAsync on " << gpus << " x " << bench::gpu_name(0) << ", NCCL "
     << bench::nccl_version() << ". Time per call: host wall clock over " << options.iterations
     << " back-to-back calls between cudaDeviceSynchronize on every GPU, median of " << options.samples
     << " samples, tandem's and raw's taken in turn. GB/s = size / tandem time. Coalesced variants move 4 tensors of size/4 (default 10 MiB "
        "buckets); scatter/gather split size over the GPUs, to/from cuda:0.\n\n";
  os << "| op | size | tandem us | raw us | raw op | tandem - raw us | tandem/raw | GB/s | goal | |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n";
  int met = 0;
  int missed = 0;
  for (const Row& row : rows) {
    const auto [goal, verdict] = judged(row);
    met += verdict == "met" ? 1 : 0;
    missed += verdict == "missed" ? 1 : 0;
    os << bench::formatted("| %s | %s | %.1f | %.1f | %s | %+.1f | %.3f | %.1f | %s | %s |\n", row.op.c_str(),
                           bench::size_label(row.bytes).c_str(), row.tandem_us, row.raw_us, row.raw_op.c_str(),
                           row.tandem_us - row.raw_us, row.tandem_us / row.raw_us,
                           static_cast<double>(row.bytes) / (row.tandem_us * 1e3), goal.c_str(), verdict.c_str());
  }
  os << "\nGoals met: " << met << " of " << met + missed << ".\n";
  return os.str();
}

int run(const Options& options) {
  const int visible = tandem::cuda_device_count();
  if (visible < 2) {
    std::cout << "comm_bench: needs at least 2 GPUs, " << visible << " visible; nothing to measure\n";
    return 0;
  }
  const int gpus = std::min(options.gpus, visible);
  if (!options.markdown.empty()) tandem::check_writable(options.markdown, "--markdown");
  Raw raw(gpus);
  std::vector<Row> rows;
  for (size_t bytes : {size_t{4} << 10, size_t{1} << 20, size_t{64} << 20, size_t{256} << 20}) {
    bench_size(bytes, gpus, raw, options, rows);
  }
  const std::string table = markdown_table(rows, gpus, options);
  std::cout << table;
  if (!options.markdown.empty()) tandem::write_file_atomically(options.markdown, table, "--markdown");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::exit_status("comm_bench", [&] { return run(parse(argc, argv)); });
}

#else  // !TANDEM_WITH_CUDA

int main(int argc, char** argv) {
  (void)parse(argc, argv);
  std::cout << "comm_bench: tandem was built without CUDA; nothing to measure\n";
  return 0;
}

#endif

#pragma once
// What the benchmark programs share: their `--flag value` command lines, the wide MLP workload, the host-clock
// timing of work on the devices, and the pieces of their tables. Header only: every .cpp file in benchmarks/ is a
// program of its own.

#include <tandem/tandem.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if TANDEM_WITH_CUDA
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace tandem::bench {

// ---- command lines

// One flag of a program: its name and what its value does; `set` throws tandem::Error for a bad value.
struct Flag {
  std::string_view name;
  std::function<void(std::string_view value)> set;
};

// A flag whose value is a decimal integer from `least` to `most`, stored in `target`.
inline Flag int_flag(std::string_view name, int& target, int least, int most) {
  return {name, [name, &target, least, most](std::string_view text) {
            int value = 0;
            const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
            TANDEM_CHECK(error == std::errc() && end == text.data() + text.size() && value >= least && value <= most,
                         name, " is ", excerpt(text), " but expected an integer from ", least, " to ", most);
            target = value;
          }};
}

// A flag whose value is stored in `target` as it is (a path, say).
inline Flag text_flag(std::string_view name, std::string& target) {
  return {name, [&target](std::string_view text) { target = text; }};
}

// A flag whose value must be one of `choices`, stored in `target`.
inline Flag choice_flag(std::string_view name, std::string& target, std::vector<std::string_view> choices) {
  return {name, [name, &target, choices = std::move(choices)](std::string_view text) {
            std::string expected;
            for (const std::string_view choice : choices) {
              if (text == choice) {
                target = text;
                return;
              }
              expected += (expected.empty() ? "" : " or ") + std::string(choice);
            }
            TANDEM_FAIL(name, " is ", excerpt(text), " but expected ", expected);
          }};
}

// Reads argv as `--flag value` pairs of `flags`. --help or -h prints `usage` on stdout and exits 0. An unknown
// flag, one without its value, or a value its flag refuses prints "<program>: <what is wrong>" and `usage` on
// stderr and exits 2.
inline void parse_flags(int argc, char** argv, std::string_view program, std::string_view usage,
                        const std::vector<Flag>& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view name = argv[i];
    if (name == "--help" || name == "-h") {
      std::cout << usage << "\n";
      std::exit(0);
    }
    try {
      const auto flag = std::find_if(flags.begin(), flags.end(), [&](const Flag& f) { return f.name == name; });
      TANDEM_CHECK(flag != flags.end(), "got flag ", excerpt(name), " but expected one of its flags (see --help)");
      TANDEM_CHECK(i + 1 < argc, excerpt(name), " is last but expected a value after it");
      flag->set(argv[++i]);
    } catch (const Error& error) {
      std::cerr << program << ": " << error.what() << "\n" << usage << "\n";
      std::exit(2);
    }
  }
}

// The exit status of a program whose work is body(): body()'s own, or 1 after "<program>: <what>" on stderr for
// what body() throws.
template <typename Body>
int exit_status(std::string_view program, Body&& body) {
  try {
    return body();
  } catch (const std::exception& error) {
    std::cerr << program << ": " << error.what() << "\n";
    return 1;
  }
}

// ---- workloads

// 4 x Linear(width, width) with ReLU between (train_step_bench's --widths sweep).
inline std::shared_ptr<nn::Module> mlp(int64_t width) {
  auto net = std::make_shared<nn::Sequential>();
  for (int layer = 0; layer < 4; ++layer) {
    if (layer > 0) net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::Linear>(width, width));
  }
  return net;
}

// The wide MLP of train_step_bench and ddp_step_bench.
inline std::shared_ptr<nn::Module> wide_mlp() { return mlp(4096); }

// ---- timing

// Blocks until every CUDA device in `devices` has finished its work (work on a CPU device is finished when its call
// returns).
inline void synchronize(const std::vector<Device>& devices) {
#if TANDEM_WITH_CUDA
  for (const Device& device : devices) {
    if (!device.is_cuda()) continue;
    cudaError_t status = cudaSetDevice(device.index());
    if (status == cudaSuccess) status = cudaDeviceSynchronize();
    TANDEM_CHECK(status == cudaSuccess, "bench::synchronize: synchronizing ", device,
                 " failed: ", cudaGetErrorString(status));
  }
#else
  (void)devices;
#endif
}

// Milliseconds of the host's wall clock that body() takes.
template <typename Body>
double host_ms(Body&& body) {
  const auto begin = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
}

// Milliseconds of the host's wall clock from every device in `devices` idle to the work of body() done on all of
// them.
template <typename Body>
double synchronized_ms(const std::vector<Device>& devices, Body&& body) {
  synchronize(devices);
  return host_ms([&] {
    body();
    synchronize(devices);
  });
}

// The middle element (the upper one of an even count); `values` must not be empty.
inline double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2), values.end());
  return values[values.size() / 2];
}

struct Sampling {
  int warmup;          // untimed calls first
  int samples;         // timed samples, at least 1
  int iterations = 1;  // back-to-back calls in each sample
};

// One sample: `iterations` calls of body() timed with synchronized_ms on `devices`, in milliseconds per call.
template <typename Body>
double sample_ms_per_call(const std::vector<Device>& devices, int iterations, Body& body) {
  const double ms = synchronized_ms(devices, [&] {
    for (int i = 0; i < iterations; ++i) body();
  });
  return ms / iterations;
}

// Milliseconds per call of body(), the median over the samples: after the warm-up calls, each sample times
// `iterations` calls with synchronized_ms on `devices` and divides by `iterations`.
template <typename Body>
double median_ms_per_call(const std::vector<Device>& devices, const Sampling& sampling, Body&& body) {
  for (int i = 0; i < sampling.warmup; ++i) body();
  std::vector<double> per_call;
  for (int s = 0; s < sampling.samples; ++s) per_call.push_back(sample_ms_per_call(devices, sampling.iterations, body));
  return median(per_call);
}

// median_ms_per_call of two bodies, their warm-ups and samples taken in turn (one of `first`, one of `second`, ...),
// so that the machine's speed drifting during the run weighs on both alike: for a call and its raw alternative.
template <typename First, typename Second>
std::pair<double, double> alternating_median_ms_per_call(const std::vector<Device>& devices, const Sampling& sampling,
                                                         First&& first, Second&& second) {
  for (int i = 0; i < sampling.warmup; ++i) {
    first();
    second();
  }
  std::vector<double> first_ms;
  std::vector<double> second_ms;
  for (int s = 0; s < sampling.samples; ++s) {
    first_ms.push_back(sample_ms_per_call(devices, sampling.iterations, first));
    second_ms.push_back(sample_ms_per_call(devices, sampling.iterations, second));
  }
  return {median(first_ms), median(second_ms)};
}

// ---- tables

// printf's formatting of `args` by `pattern`, as a string (a table cell or line; at most 255 characters).
template <typename... Args>
std::string formatted(const char* pattern, Args... args) {
  char text[256];
  std::snprintf(text, sizeof(text), pattern, args...);
  return text;
}

// The device that a --device cuda|cpu flag names: cuda:0 or cpu:0; none, having said so, for cuda when no GPU is
// visible (the benchmark then has nothing to measure).
inline std::optional<Device> flag_device(const std::string& flag, std::string_view program) {
  if (flag != "cuda") return Device::cpu();
  if (cuda_device_count() >= 1) return Device::cuda(0);
  std::cout << program << ": no GPU visible; nothing to measure (--device cpu runs on the CPU)\n";
  return std::nullopt;
}

// A time in milliseconds as a table cell: three decimals below 10 ms, one above.
inline std::string ms_cell(double ms) { return formatted(ms < 10 ? "%.3f" : "%.1f", ms); }

// "4 KB", "64 MB": a buffer size as the tables print it.
inline std::string size_label(size_t bytes) {
  return bytes >= (size_t{1} << 20) ? std::to_string(bytes >> 20) + " MB" : std::to_string(bytes >> 10) + " KB";
}

#if TANDEM_WITH_CUDA

inline void check(cudaError_t status, const char* call) {
  TANDEM_CHECK(status == cudaSuccess, call, " failed: ", cudaGetErrorString(status));
}
inline void check(ncclResult_t status, const char* call) {
  TANDEM_CHECK(status == ncclSuccess, call, " failed: ", ncclGetErrorString(status));
}

// What a table says it ran on: the name of a GPU and the NCCL version (as ncclGetVersion gives it).
inline std::string gpu_name(int device) {
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
  return properties.name;
}
inline int nccl_version() {
  int version = 0;
  check(ncclGetVersion(&version), "ncclGetVersion");
  return version;
}

#endif

}  // namespace tandem::bench

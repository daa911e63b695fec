// Comm functions called from several host threads at once, each thread on its own device set: every GPU pair, all
// GPUs, and sets of virtual CPU devices and mixes beside them. On GPUs this exercises the lock-free lookup of the
// cached NCCL communicators (Note [Lock-free communicator lookup] in comm/src/immortal_cache.h) while other threads
// create theirs, and collectives issued concurrently. Every result is checked against its closed form.

#include <atomic>
#include <string>
#include <thread>

#include "comm/comm_test_helpers.h"

namespace tandem {
namespace {

constexpr int64_t kLength = 96;
constexpr int kRounds = 12;

// The device sets the threads work on: pairs of virtual CPU devices and a mixed set always; with two or more GPUs,
// every pair of GPUs in both orders and all of them.
std::vector<std::vector<Device>> device_sets() {
  std::vector<std::vector<Device>> sets = {{Device::cpu(0), Device::cpu(1)},
                                           {Device::cpu(2), Device::cpu(3), Device::cpu(4)},
                                           {Device::cpu(5), Device::cpu(6)}};
  const int gpus = cuda_device_count();
  if (gpus >= 1) sets.push_back({Device::cuda(0), Device::cpu(7)});
  if (gpus < 2) return sets;
  for (int a = 0; a < gpus; ++a) {
    for (int b = 0; b < gpus; ++b) {
      if (a != b) sets.push_back({Device::cuda(a), Device::cuda(b)});
    }
  }
  std::vector<Device> all;
  for (int d = 0; d < gpus; ++d) all.push_back(Device::cuda(d));
  if (gpus > 2) sets.push_back(all);
  return sets;
}

// One round of every collective on `devices`; value v = seed * (i + 1) on device i. Returns the first mismatch.
std::string run_round(const std::vector<Device>& devices, float seed) {
  const auto n = static_cast<int64_t>(devices.size());
  const float total = seed * static_cast<float>(n * (n + 1) / 2);
  std::vector<Tensor> tensors;
  for (int64_t i = 0; i < n; ++i)
    tensors.push_back(Tensor::full({kLength}, seed * static_cast<float>(i + 1), devices[static_cast<size_t>(i)]));
  const auto all_equal = [](const Tensor& t, float value) {
    for (float x : t.to_vector()) {
      if (x != value) return false;
    }
    return true;
  };
  const Tensor sum = comm::reduce_add(tensors, devices.back());
  if (!all_equal(sum, total)) return "reduce_add";
  for (const Tensor& copy : comm::broadcast(tensors[0], devices)) {
    if (!all_equal(copy, seed)) return "broadcast";
  }
  const Tensor gathered = comm::gather(tensors, 0, devices[0]);
  const std::vector<float> values = gathered.to_vector();
  for (size_t k = 0; k < values.size(); ++k) {
    if (values[k] != seed * static_cast<float>(k / static_cast<size_t>(kLength) + 1)) return "gather";
  }
  const std::vector<Tensor> chunks = comm::scatter(gathered, devices);
  for (int64_t i = 0; i < n; ++i) {
    if (!all_equal(chunks[static_cast<size_t>(i)], seed * static_cast<float>(i + 1))) return "scatter";
  }
  comm::all_reduce(tensors);
  for (const Tensor& t : tensors) {
    if (!all_equal(t, total)) return "all_reduce";
  }
  return "";
}

TEST(CommConcurrency, ThreadsRunCollectivesOnTheirOwnDeviceSets) {
  const std::vector<std::vector<Device>> sets = device_sets();
  std::vector<std::string> failures(sets.size());
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < sets.size(); ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      try {
        for (int round = 0; round < kRounds && failures[t].empty(); ++round) {
          const std::string wrong = run_round(sets[t], static_cast<float>(t + 1) + 0.5f * static_cast<float>(round));
          if (!wrong.empty()) failures[t] = wrong + " gave a wrong result in round " + std::to_string(round);
        }
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  }
  go.store(true);
  for (std::thread& thread : threads) thread.join();
  for (size_t t = 0; t < sets.size(); ++t) {
    std::string name;
    for (const Device& d : sets[t]) name += d.str() + " ";
    EXPECT_EQ(failures[t], "") << "on " << name;
  }
}

}  // namespace
}  // namespace tandem

#pragma once
// The devices of a multi-process test's group, as the tests' parameter: one or two virtual CPU devices per process,
// or GPUs: under a launcher cuda:<local rank> in each process (one GPU per process), alone cuda:0 and cuda:1 (a group
// of one process). The GPU instances are named CUDA, so the filter '*CUDA*' selects them, and skip (alike on every
// process of the host) where the host has fewer GPUs than the job puts on it.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "tandem/comm/process_group.h"

namespace tandem::testing {

enum class GroupDevices { CPU1, CPU2, CUDA };

inline std::vector<Device> devices_of(GroupDevices kind, const comm::LaunchInfo& launch) {
  switch (kind) {
    case GroupDevices::CPU1:
      return {Device::cpu(0)};
    case GroupDevices::CPU2:
      return {Device::cpu(0), Device::cpu(1)};
    case GroupDevices::CUDA:
      break;
  }
  if (launch.channel == comm::LaunchInfo::Channel::None) return {Device::cuda(0), Device::cuda(1)};
  return {Device::cuda(launch.local_rank)};
}

// The GPUs the job puts on this host: one per process of the host, two for a process alone; none on CPU devices.
inline int gpus_on_this_host(GroupDevices kind, const comm::LaunchInfo& launch) {
  if (kind != GroupDevices::CUDA) return 0;
  return launch.channel == comm::LaunchInfo::Channel::None ? 2 : launch.local_size;
}

// Absolute tolerance for results on the group's devices against the reference on virtual CPU devices: float32 sums
// in another order on GPUs (cuBLAS, the loss kernels, NCCL) grow over many steps a little past the CPU runs' 1e-6,
// and matter only for values near zero; the relative tolerance stays 1e-5.
inline double reference_atol(GroupDevices kind) { return kind == GroupDevices::CUDA ? 1e-5 : 1e-6; }

inline std::string name_of(GroupDevices kind) {
  switch (kind) {
    case GroupDevices::CPU1:
      return "CPU1";
    case GroupDevices::CPU2:
      return "CPU2";
    case GroupDevices::CUDA:
      break;
  }
  return "CUDA";
}

// A fixture whose group_ (from the environment, on the parameter's devices) lives for one test; the test skips when
// this host lacks the GPUs. A generous timeout: a test that leaves a collective unmatched ends the job instead of
// hanging ctest.
class OnGroupDevices : public ::testing::TestWithParam<GroupDevices> {
 protected:
  void SetUp() override {
    const comm::LaunchInfo launch = comm::LaunchInfo::from_environment();
    TANDEM_REQUIRE_GPUS(gpus_on_this_host(GetParam(), launch));
    group_ =
        comm::ProcessGroup::from_environment(devices_of(GetParam(), launch), {.timeout = std::chrono::seconds(60)});
  }
  void TearDown() override { group_.reset(); }

  std::shared_ptr<comm::ProcessGroup> group_;
};

#define TANDEM_INSTANTIATE_ON_GROUP_DEVICES(Prefix, Suite)                                            \
  INSTANTIATE_TEST_SUITE_P(                                                                           \
      Prefix, Suite,                                                                                  \
      ::testing::Values(::tandem::testing::GroupDevices::CPU1, ::tandem::testing::GroupDevices::CPU2, \
                        ::tandem::testing::GroupDevices::CUDA),                                       \
      [](const ::testing::TestParamInfo<::tandem::testing::GroupDevices>& info) {                     \
        return ::tandem::testing::name_of(info.param);                                                \
      })

}  // namespace tandem::testing

#include "support/one_and_two_gpus.h"

namespace tandem::testing {

void OneAndTwoGpus::SetUp() { TANDEM_REQUIRE_GPUS(GetParam()); }

std::vector<Device> OneAndTwoGpus::devices() const {
  std::vector<Device> gpus;
  for (int d = 0; d < GetParam(); ++d) gpus.push_back(Device::cuda(d));
  return gpus;
}

std::string gpu_count_name(const ::testing::TestParamInfo<int>& info) { return info.param == 1 ? "CUDA" : "MultiCUDA"; }

}  // namespace tandem::testing

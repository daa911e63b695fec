#pragma once
// A test body on the first GPU and on the first two: the fixture of the tests that compare a step on one and on two
// GPUs (captured steps against eager ones, say).

#include <string>
#include <vector>

#include "support/test_support.h"

namespace tandem::testing {

// Value-parameterized base: the parameter is a GPU count, 1 or 2, and devices() the first that many GPUs; an instance
// skips when fewer GPUs are visible. Instantiate with TANDEM_INSTANTIATE_ON_ONE_AND_TWO_GPUS(Suite): test names end in
// /CUDA (one GPU) and /MultiCUDA (two).
class OneAndTwoGpus : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override;
  std::vector<Device> devices() const;  // cuda:0, ..., cuda:(count - 1)
};
std::string gpu_count_name(const ::testing::TestParamInfo<int>& info);
#define TANDEM_INSTANTIATE_ON_ONE_AND_TWO_GPUS(Suite) \
  INSTANTIATE_TEST_SUITE_P(Gpus, Suite, ::testing::Values(1, 2), ::tandem::testing::gpu_count_name)

}  // namespace tandem::testing

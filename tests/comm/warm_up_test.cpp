// comm::warm_up: the state of a device set created up front, after which collectives over it work as before.

#include <vector>

#include "support/test_support.h"

namespace tandem {
namespace {

TEST(CommWarmUp, CpuDevicesNeedNothingAndBadListsAreErrors) {
  comm::warm_up({Device::cpu(0), Device::cpu(1)});
  comm::warm_up({});
  EXPECT_ERROR(comm::warm_up({Device::cpu(0), Device::cpu(1), Device::cpu(1)}),
               "comm::warm_up: device cpu:1 appears twice (entries 1 and 2) but expected distinct devices");
  EXPECT_ERROR(comm::warm_up({Device::cpu(0), Device::cuda(cuda_device_count())}), "comm::warm_up: device cuda:");
}

TEST(CommWarmUpCUDA, CollectivesOverTheWarmedDevicesSum) {
  TANDEM_REQUIRE_GPUS(1);
  std::vector<Device> gpus;
  for (int d = cuda_device_count() - 1; d >= 0; --d) gpus.push_back(Device::cuda(d));  // any order
  comm::warm_up(gpus);
  comm::warm_up(gpus);  // again: the cached communicators are kept
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < gpus.size(); ++i) {
    tensors.push_back(Tensor::full({3}, static_cast<float>(i + 1), gpus[i]));
  }
  comm::all_reduce(tensors);
  const double total = static_cast<double>(gpus.size() * (gpus.size() + 1) / 2);
  for (const Tensor& tensor : tensors) testing::expect_values(tensor, {total, total, total}, {3});
}

}  // namespace
}  // namespace tandem

#include "support/test_support.h"

#include <unordered_set>

namespace tandem {
namespace {

TEST(Device, ParsesEveryForm) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu(0));
  EXPECT_EQ(Device::parse("cpu:3"), Device::cpu(3));
  EXPECT_EQ(Device::parse(" cuda "), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::parse("cuda:1").str(), "cuda:1");
  EXPECT_TRUE(Device::parse("cuda:1").is_cuda());
  EXPECT_EQ(Device::parse("cpu:63").index(), 63);
}

TEST(Device, RejectsBadText) {
  EXPECT_ERROR(Device::parse("gpu:0"), "cannot parse 'gpu:0'");
  EXPECT_ERROR(Device::parse("cuda:"), "cannot parse 'cuda:'");
  EXPECT_ERROR(Device::parse("cuda:x"), "cannot parse");
  EXPECT_ERROR(Device::parse("cuda:1x"), "cannot parse");
  EXPECT_ERROR(Device::parse(""), "cannot parse");
  EXPECT_ERROR(Device::parse("cpu:64"), "out of range [0, 63]");
  EXPECT_ERROR(Device::parse("cuda:-1"), "CUDA device index -1 is negative");
  EXPECT_ERROR(Device::cuda(-1), "negative");
  EXPECT_ERROR(Device::cpu(-1), "out of range");
  // A message quotes at most an excerpt of what it was given, with control characters escaped.
  const std::string huge = "cuda:\x1b[2J" + std::string(100'000, 'x');
  const std::string message = testing::error_message_of([&] { (void)Device::parse(huge); });
  EXPECT_NE(message.find("cannot parse 'cuda:\\x1b[2Jxxx"), std::string::npos) << message;
  EXPECT_NE(message.find("... (100009 bytes)'"), std::string::npos) << message;
  EXPECT_LT(message.size(), 300u);
  EXPECT_EQ(message.find('\x1b'), std::string::npos);
}

TEST(Device, ValueSemantics) {
  std::unordered_set<Device> set{Device::cpu(0), Device::cpu(1), Device::cuda(0), Device::cpu(0)};
  EXPECT_EQ(set.size(), 3u);
  EXPECT_NE(Device::cpu(0), Device::cuda(0));
  std::ostringstream os;
  os << Device::cuda(2);
  EXPECT_EQ(os.str(), "cuda:2");
}

TEST(Device, DefaultDevicesAreEveryGpuOrTwoCpus) {
  const std::vector<Device> devices = default_devices();
  if (cuda_device_count() == 0) {
    EXPECT_EQ(devices, (std::vector<Device>{Device::cpu(0), Device::cpu(1)}));
  } else {
    ASSERT_EQ(static_cast<int>(devices.size()), cuda_device_count());
    for (int i = 0; i < cuda_device_count(); ++i) EXPECT_EQ(devices[i], Device::cuda(i));
  }
}

TEST(Device, ParsesDeviceLists) {
  EXPECT_EQ(parse_devices("cpu:0,cpu:1, cpu:2"),
            (std::vector<Device>{Device::cpu(0), Device::cpu(1), Device::cpu(2)}));
  EXPECT_EQ(parse_devices("all"), default_devices());
  EXPECT_ERROR(parse_devices("cpu:0,cpu:1,cpu:0"), "parse_devices: device cpu:0 appears twice (entries 0 and 2)");
  EXPECT_ERROR(parse_devices(""), "empty device list");
  EXPECT_ERROR(parse_devices("cpu:0,"), "cannot parse");
  const std::string missing = "cuda:" + std::to_string(cuda_device_count());
  EXPECT_ERROR(parse_devices(missing), "does not exist");
}

TEST(Device, MissingGpuIsAClearError) {
  const Device missing = Device::cuda(cuda_device_count());
  EXPECT_ERROR(check_device_available(missing, "test"), "test: device " + missing.str() + " does not exist");
  EXPECT_ERROR(Tensor::zeros({2}, missing), "does not exist");
  EXPECT_ERROR(Tensor::zeros({2}).to(missing), "does not exist");
}

}  // namespace
}  // namespace tandem

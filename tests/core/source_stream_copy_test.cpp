// copy_on_source_stream: a copy between GPUs on the source's compute stream that orders the destination after it
// (Note [Copies on the source stream]); a plain copy elsewhere.
#include "support/test_support.h"

namespace tandem {
namespace {

TEST(CopyOnSourceStream, CopiesBetweenCpuDevicesAndChecksItsArguments) {
  const Tensor src = Tensor::from_vector({1.5f, -2.0f, 3.25f, 4.0f}, {2, 2}, Device::cpu(1));
  const Tensor dst = Tensor::zeros({4}, Device::cpu(0));
  copy_on_source_stream(src, dst);
  EXPECT_EQ(dst.to_vector(), (std::vector<float>{1.5f, -2.0f, 3.25f, 4.0f}));

  EXPECT_ERROR(copy_on_source_stream(src, Tensor()),
               "copy_on_source_stream: source and destination must be defined tensors");
  EXPECT_ERROR(copy_on_source_stream(src.t(), dst),
               "copy_on_source_stream: source (strides [1, 2]) and destination (strides [1]) must be contiguous");
  EXPECT_ERROR(copy_on_source_stream(src, Tensor::zeros({3}, Device::cpu(0))),
               "copy_on_source_stream: copies 4 elements of float32 into 3 of float32 but expected the same number "
               "and dtype");
}

// The source comes out of a slow chain of work on cuda:1 and the destination is read on cuda:0 at once: the read
// must see the copied values, so cuda:0 waited for the copy, which waited for its producer. The destination is
// private as the function requires: made without a kernel (a fill on cuda:0 would be unordered with the copy and
// could land after it).
TEST(CopyOnSourceStream, OrdersTheDestinationAfterASlowProducerMultiCUDA) {
  TANDEM_REQUIRE_GPUS(2);
  const Tensor a = Tensor::full({1024, 1024}, 1.0f / 1024.0f, Device::cuda(1));
  Tensor x = Tensor::ones({1024, 1024}, Device::cuda(1));
  for (int i = 0; i < 20; ++i) x = matmul(x, a);  // stays all ones, after a while
  const Tensor src = sum(x, 0).narrow(0, 0, 8);   // eight values of 1024
  const Tensor dst = Tensor::empty({8}, Device::cuda(0));
  copy_on_source_stream(src, dst);
  const Tensor doubled = dst * 2.0f;  // on cuda:0, after the copy
  for (const float value : doubled.to_vector()) EXPECT_FLOAT_EQ(value, 2048.0f);
}

}  // namespace
}  // namespace tandem

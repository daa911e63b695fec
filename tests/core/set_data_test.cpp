// Tensor::set_data, PyTorch's `tensor.data = other`: the handle keeps its identity and autograd state and takes the
// other tensor's storage, shape and device.
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;

// From cpu:0 to another device: cpu:1 in the CPU instance, cuda:0 in the CUDA one.
class SetDataTest : public testing::EveryDevice {
 protected:
  Device target() const { return device() == Device::cpu(0) ? Device::cpu(1) : device(); }
};

TEST_P(SetDataTest, EveryHandleSeesTheNewDataAndKeepsItsAutogradState) {
  Tensor w = Tensor::from_vector({1, 2, 3}, {3}).set_requires_grad(true);
  const Tensor held = w;  // a second handle on the same tensor, as an optimizer keeps
  const Tensor old_view = w.detach();
  int hook_calls = 0;
  w.register_post_accumulate_grad_hook([&](const Tensor&) { ++hook_calls; });

  const Tensor data = Tensor::from_vector({4, 5, 6, 7}, {2, 2}, target());
  w.set_data(data);
  EXPECT_TRUE(held.is_same(w));
  EXPECT_EQ(held.device(), target());
  EXPECT_EQ(held.shape(), (Shape{2, 2}));
  EXPECT_TRUE(held.shares_storage_with(data));  // nothing copied
  expect_values(held, {4, 5, 6, 7}, {2, 2});
  EXPECT_TRUE(held.requires_grad());
  EXPECT_TRUE(held.is_leaf());
  EXPECT_FALSE(data.requires_grad());
  expect_values(old_view, {1, 2, 3}, {3});  // a view of the old data keeps it

  (w * 2.0f).backward(Tensor::ones({2, 2}, target()));
  ASSERT_TRUE(held.grad().defined());
  EXPECT_EQ(held.grad().device(), target());
  expect_values(held.grad(), {2, 2, 2, 2}, {2, 2});
  EXPECT_EQ(hook_calls, 1);
}

TEST_P(SetDataTest, TakesNoHistoryFromTheNewData) {
  Tensor w = Tensor::ones({2}).set_requires_grad(true);
  Tensor x = Tensor::ones({2}, target()).set_requires_grad(true);
  w.set_data(x * 3.0f);
  EXPECT_TRUE(w.is_leaf());
  sum(w * w).backward();
  expect_values(w.grad(), {6, 6}, {2});
  EXPECT_FALSE(x.grad().defined());
}

TEST_P(SetDataTest, AGraphRecordedAfterAMoveAccumulatesOnTheNewDevice) {
  Tensor w = Tensor::from_vector({1, 2}, {2}).set_requires_grad(true);
  const Tensor before = sum(w * w);  // keeps the accumulator made for the data on cpu:0 alive
  w.set_data(w.detach().to(target()));
  sum(w * 3.0f).backward();
  EXPECT_EQ(w.grad().device(), target());
  expect_values(w.grad(), {3, 3}, {2});
  EXPECT_TRUE(before.requires_grad());
}

TEST_P(SetDataTest, Errors) {
  Tensor w = Tensor::ones({2}).set_requires_grad(true);
  EXPECT_ERROR(Tensor().set_data(w), "Tensor::set_data: the tensor is undefined");
  EXPECT_ERROR(w.set_data(Tensor()), "Tensor::set_data: the new data is an undefined tensor");
  Tensor result = w * 2.0f;
  EXPECT_ERROR(result.set_data(Tensor::ones({2})),
               "Tensor::set_data: the tensor is the result of ScaleBackward but only leaves can take new data");
  w.set_grad(Tensor::ones({2}));
  EXPECT_ERROR(w.set_data(Tensor::ones({2}, target())),
               "Tensor::set_data: the tensor's gradient has shape [2] on cpu:0 but the new data has shape [2] on " +
                   target().str() + "; move or clear the gradient first");
  EXPECT_ERROR(w.set_data(Tensor::ones({3})), "gradient has shape [2] on cpu:0 but the new data has shape [3]");
  EXPECT_EQ(w.device(), Device::cpu(0));  // refused calls change nothing
  EXPECT_EQ(w.shape(), (Shape{2}));
  w.set_grad(Tensor());
  w.set_data(Tensor::ones({3}, target()));
  EXPECT_EQ(w.shape(), (Shape{3}));
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(SetDataTest);

}  // namespace
}  // namespace tandem

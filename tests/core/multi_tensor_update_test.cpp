// The list forms of sgd_update and adam_update (Note [Multi-tensor updates] in fused.h) against one single-tensor
// update per entry, bit for bit, on every device: mixed sizes (empty ones too), options that differ per entry,
// learning rates and step factors in device memory, and more entries than one launch takes; and tensors updated four
// elements at a time against the same values updated one at a time.

#include <cstdint>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace tandem {
namespace {

class MultiTensorUpdate : public testing::EveryDevice {};

// More entries than one kernel launch holds (Note [Multi-tensor kernel arguments] in optimizer_updates.cu), so that the
// list is split on a GPU.
constexpr int kEntries = 70;

int64_t size_of_entry(int i) { return i % 11 == 5 ? 0 : 1 + (i * 37) % 300; }

Tensor random_like_size(int64_t n, Device device) { return Tensor::randn({n}, device); }

Tensor copy_of(const Tensor& t) { return t.defined() ? t.clone() : Tensor(); }

void expect_bitwise_equal(const Tensor& actual, const Tensor& expected, int entry, const char* what) {
  ASSERT_EQ(actual.defined(), expected.defined()) << what << " of entry " << entry;
  if (!actual.defined()) return;
  EXPECT_EQ(actual.to_vector(), expected.to_vector()) << what << " of entry " << entry;
}

SgdUpdate sgd_rule(int i) {
  SgdUpdate rule;
  rule.lr = 0.01f * static_cast<float>(1 + i % 5);
  rule.momentum = i % 4 == 0 ? 0.0f : 0.9f;
  rule.dampening = i % 3 == 1 ? 0.25f : 0.0f;
  rule.weight_decay = i % 2 == 0 ? 1e-2f : 0.0f;
  rule.nesterov = rule.momentum != 0.0f && rule.dampening == 0.0f && i % 5 == 2;
  rule.first_step = i % 7 == 3;
  return rule;
}

// Entries of n random elements (the second moments and their maxima non-negative).
SgdParameter random_sgd_parameter(int64_t n, const SgdUpdate& rule, const Tensor& lr, Device device) {
  return {.param = random_like_size(n, device),
          .grad = random_like_size(n, device),
          .momentum_buffer = random_like_size(n, device),
          .update = rule,
          .lr = lr};
}

AdamParameter random_adam_parameter(int64_t n, const AdamUpdate& rule, const Tensor& step_factors, Device device) {
  return {.param = random_like_size(n, device),
          .grad = random_like_size(n, device),
          .exp_avg = random_like_size(n, device),
          .exp_avg_sq = Tensor::rand({n}, device),
          .max_exp_avg_sq = rule.amsgrad ? Tensor::rand({n}, device) : Tensor(),
          .update = rule,
          .step_factors = step_factors};
}

// The same entry with each of its tensors replaced by copy(tensor).
SgdParameter with_copies(const SgdParameter& p, Tensor (*copy)(const Tensor&)) {
  return {copy(p.param), copy(p.grad), copy(p.momentum_buffer), p.update, p.lr};
}

AdamParameter with_copies(const AdamParameter& p, Tensor (*copy)(const Tensor&)) {
  return {copy(p.param),      copy(p.grad),           copy(p.exp_avg), copy(p.exp_avg_sq),
          copy(p.max_exp_avg_sq), p.update, p.step_factors};
}

TEST_P(MultiTensorUpdate, SgdListEqualsOneUpdatePerParameter) {
  manual_seed(3);
  std::vector<SgdParameter> list;
  std::vector<SgdParameter> single;
  for (int i = 0; i < kEntries; ++i) {
    const Tensor lr = i % 2 == 1 ? Tensor::full({1}, 0.003f * static_cast<float>(i), device()) : Tensor();
    const SgdParameter p = random_sgd_parameter(size_of_entry(i), sgd_rule(i), lr, device());
    list.push_back(p);
    single.push_back(with_copies(p, copy_of));
  }
  sgd_update(list);
  for (const SgdParameter& p : single) {
    if (p.lr.defined()) {
      sgd_update(p.param, p.grad, p.momentum_buffer, p.update, p.lr);
    } else {
      sgd_update(p.param, p.grad, p.momentum_buffer, p.update);
    }
  }
  for (int i = 0; i < kEntries; ++i) {
    expect_bitwise_equal(list[i].param, single[i].param, i, "param");
    expect_bitwise_equal(list[i].momentum_buffer, single[i].momentum_buffer, i, "momentum_buffer");
  }
  // Something moved: the comparison above is not between two untouched lists.
  EXPECT_NE(list[1].param.to_vector(), single[1].grad.to_vector());
}

AdamUpdate adam_rule(int i) {
  AdamUpdate rule;
  rule.param_scale = i % 3 == 0 ? 0.999f : 1.0f;
  rule.weight_decay = i % 3 == 1 ? 1e-2f : 0.0f;
  rule.one_minus_beta1 = i % 5 == 4 ? 0.7f : 0.1f;  // both forms of lerp
  rule.step_size = 1e-3f * static_cast<float>(1 + i % 4);
  rule.bias_correction2_sqrt = 0.05f + 0.01f * static_cast<float>(i % 6);
  rule.amsgrad = i % 2 == 0;
  return rule;
}

TEST_P(MultiTensorUpdate, AdamListEqualsOneUpdatePerParameter) {
  manual_seed(4);
  std::vector<AdamParameter> list;
  std::vector<AdamParameter> single;
  for (int i = 0; i < kEntries; ++i) {
    const Tensor factors = i % 4 == 1 ? Tensor::from_vector({0.99f, 2e-3f, 0.3f}, {3}, device()) : Tensor();
    const AdamParameter p = random_adam_parameter(size_of_entry(i), adam_rule(i), factors, device());
    list.push_back(p);
    single.push_back(with_copies(p, copy_of));
  }
  adam_update(list);
  for (const AdamParameter& p : single) {
    if (p.step_factors.defined()) {
      adam_update(p.param, p.grad, p.exp_avg, p.exp_avg_sq, p.max_exp_avg_sq, p.update, p.step_factors);
    } else {
      adam_update(p.param, p.grad, p.exp_avg, p.exp_avg_sq, p.max_exp_avg_sq, p.update);
    }
  }
  for (int i = 0; i < kEntries; ++i) {
    expect_bitwise_equal(list[i].param, single[i].param, i, "param");
    expect_bitwise_equal(list[i].exp_avg, single[i].exp_avg, i, "exp_avg");
    expect_bitwise_equal(list[i].exp_avg_sq, single[i].exp_avg_sq, i, "exp_avg_sq");
    expect_bitwise_equal(list[i].max_exp_avg_sq, single[i].max_exp_avg_sq, i, "max_exp_avg_sq");
  }
}

TEST_P(MultiTensorUpdate, ListsNameTheirBadEntry) {
  const Tensor param = Tensor::zeros({3}, device());
  EXPECT_ERROR(sgd_update(std::vector<SgdParameter>{}), "sgd_update: got no parameters but expected at least one");
  EXPECT_ERROR(adam_update(std::vector<AdamParameter>{}), "adam_update: got no parameters but expected at least one");
  SgdUpdate momentum;
  momentum.momentum = 0.9f;
  const std::vector<SgdParameter> no_buffer{{param, Tensor::zeros({3}, device()), Tensor(), momentum, Tensor()}};
  EXPECT_ERROR(sgd_update(no_buffer), "sgd_update: momentum_buffer");
  const std::vector<SgdParameter> wrong_grad{{param, Tensor::zeros({4}, device()), Tensor(), SgdUpdate{}, Tensor()}};
  EXPECT_ERROR(sgd_update(wrong_grad), "sgd_update: param has shape [3] but grad has shape [4]");
  const std::vector<SgdParameter> wide_lr{
      {param, Tensor::zeros({3}, device()), Tensor(), SgdUpdate{}, Tensor::zeros({2}, device())}};
  EXPECT_ERROR(sgd_update(wide_lr), "sgd_update: lr has shape [2] but expected 1 contiguous elements");
  const std::vector<AdamParameter> short_factors{{param, Tensor::zeros({3}, device()), Tensor::zeros({3}, device()),
                                                  Tensor::zeros({3}, device()), Tensor(), AdamUpdate{},
                                                  Tensor::zeros({2}, device())}};
  EXPECT_ERROR(adam_update(short_factors), "adam_update: step_factors has shape [2] but expected 3");
  // A bad entry anywhere stops the whole list before anything is written.
  const std::vector<SgdParameter> second_bad{
      {param, Tensor::ones({3}, device()), Tensor(), SgdUpdate{}, Tensor()},
      {Tensor::zeros({2}, device()), Tensor::zeros({5}, device()), Tensor(), SgdUpdate{}, Tensor()}};
  EXPECT_ERROR(sgd_update(second_bad), "grad has shape [5]");
  EXPECT_EQ(param.to_vector(), (std::vector<float>{0.0f, 0.0f, 0.0f}));
}

// `t`'s values one element into a storage of their own: the view starts 4 bytes past a 16-byte boundary, so a GPU
// updates it one element at a time where a fresh tensor is updated four at a time (Note [Updates four elements at a
// time] in optimizer_updates.cu).
Tensor misaligned_copy(const Tensor& t) {
  if (!t.defined()) return Tensor();
  Tensor view = Tensor::zeros({t.numel() + 1}, t.device()).narrow(0, 1, t.numel());
  view.copy_(t);
  return view;
}

// Groups of four and single elements (a size that leaves three over) give the same bits, for every rule's branches.
TEST_P(MultiTensorUpdate, FourAtATimeEqualsOneAtATime) {
  manual_seed(5);
  constexpr int64_t kSize = 4 * 1025 + 3;
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE("rule " + std::to_string(i));
    const SgdParameter aligned = random_sgd_parameter(kSize, sgd_rule(i), Tensor(), device());
    const SgdParameter single = with_copies(aligned, misaligned_copy);
    sgd_update(std::vector<SgdParameter>{aligned});
    sgd_update(std::vector<SgdParameter>{single});
    expect_bitwise_equal(single.param, aligned.param, i, "sgd param");
    expect_bitwise_equal(single.momentum_buffer, aligned.momentum_buffer, i, "sgd momentum_buffer");

    const AdamParameter moments = random_adam_parameter(kSize, adam_rule(i), Tensor(), device());
    const AdamParameter moments_single = with_copies(moments, misaligned_copy);
    const std::vector<float> before = moments.param.to_vector();
    adam_update(std::vector<AdamParameter>{moments});
    adam_update(std::vector<AdamParameter>{moments_single});
    expect_bitwise_equal(moments_single.param, moments.param, i, "adam param");
    expect_bitwise_equal(moments_single.exp_avg, moments.exp_avg, i, "adam exp_avg");
    expect_bitwise_equal(moments_single.exp_avg_sq, moments.exp_avg_sq, i, "adam exp_avg_sq");
    expect_bitwise_equal(moments_single.max_exp_avg_sq, moments.max_exp_avg_sq, i, "adam max_exp_avg_sq");
    EXPECT_NE(moments.param.to_vector(), before);  // the update moved something
  }
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(MultiTensorUpdate);

TEST(MultiTensorUpdateOnSeveralDevices, EachDeviceTakesItsOwnEntries) {
  SgdUpdate rule;
  rule.lr = 0.5f;
  const Tensor a = Tensor::ones({2}, Device::cpu(0));
  const Tensor b = Tensor::ones({3}, Device::cpu(1));
  const Tensor c = Tensor::ones({1}, Device::cpu(0));
  sgd_update({{a, Tensor::full({2}, 2.0f, Device::cpu(0)), Tensor(), rule, Tensor()},
              {b, Tensor::full({3}, 4.0f, Device::cpu(1)), Tensor(), rule, Tensor()},
              {c, Tensor::full({1}, -2.0f, Device::cpu(0)), Tensor(), rule, Tensor::full({1}, 0.25f, Device::cpu(0))}});
  EXPECT_EQ(a.to_vector(), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(b.to_vector(), (std::vector<float>{-1.0f, -1.0f, -1.0f}));
  EXPECT_EQ(c.to_vector(), (std::vector<float>{1.5f}));
  EXPECT_ERROR(sgd_update({{a, Tensor::zeros({2}, Device::cpu(1)), Tensor(), rule, Tensor()}}), "sgd_update");
}

}  // namespace
}  // namespace tandem

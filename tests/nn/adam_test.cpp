// optim::Adam and optim::AdamW against a float64 implementation of PyTorch's rules (adam_reference.h), on every
// device: trajectories over many steps, weight decay of both kinds, amsgrad, per-parameter step counts, parameter
// groups, option checks.
#include "adam_reference.h"
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::AdamReference;
using testing::expect_values;
using testing::Quadratic;
using testing::to_double;

std::vector<float> to_float(const std::vector<double>& values) { return {values.begin(), values.end()}; }

// Float32 rounding accumulated over the steps, against a float64 reference.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-5;

template <bool kDecoupled>
AdamReference reference_for(const optim::AdamFamilyOptions<kDecoupled>& o) {
  return AdamReference{.lr = o.lr,
                       .beta1 = o.betas[0],
                       .beta2 = o.betas[1],
                       .eps = o.eps,
                       .weight_decay = o.weight_decay,
                       .decoupled = kDecoupled,
                       .amsgrad = o.amsgrad};
}

// Sets p's gradient to the quadratic problem's at p's current (float32) values.
void set_quadratic_grad(const Tensor& p, const Quadratic& q) {
  p.set_grad(Tensor::from_vector(to_float(q.gradient(to_double(p))), p.shape(), p.device()));
}

class AdamTest : public testing::EveryDevice {
 protected:
  // Runs `steps` updates of tandem's optimizer and of the reference from the same start and compares every step.
  template <bool kDecoupled>
  void expect_trajectory(const optim::AdamFamilyOptions<kDecoupled>& options, int steps = 25) {
    const Quadratic q;
    Tensor p = Tensor::from_vector(to_float(q.start), {2, 3}, device()).set_requires_grad(true);
    optim::AdamFamily<kDecoupled> adam({p}, options);
    AdamReference reference = reference_for(options);
    std::vector<double> expected = q.start;
    for (int k = 0; k < steps; ++k) {
      set_quadratic_grad(p, q);
      reference.step(expected, q.gradient(to_double(p)));
      adam.step();
      SCOPED_TRACE("step " + std::to_string(k + 1));
      expect_values(p, expected, {2, 3}, kRtol, kAtol);
    }
    EXPECT_EQ(adam.step_count(0), steps);
  }
};

TEST_P(AdamTest, DefaultsArePyTorchs) {
  const optim::AdamOptions adam;
  EXPECT_EQ(adam.lr, 1e-3);
  EXPECT_EQ(adam.betas[0], 0.9);
  EXPECT_EQ(adam.betas[1], 0.999);
  EXPECT_EQ(adam.eps, 1e-8);
  EXPECT_EQ(adam.weight_decay, 0.0);
  EXPECT_FALSE(adam.amsgrad);
  EXPECT_EQ(optim::AdamWOptions{}.weight_decay, 1e-2);
  expect_trajectory(optim::AdamOptions{});
  expect_trajectory(optim::AdamWOptions{});
}

TEST_P(AdamTest, AdamMatchesTheReference) { expect_trajectory(optim::AdamOptions{.lr = 0.05}); }

TEST_P(AdamTest, AdamAddsWeightDecayToTheGradient) {
  expect_trajectory(optim::AdamOptions{.lr = 0.05, .weight_decay = 0.3});
}

TEST_P(AdamTest, AdamWithAmsgrad) {
  expect_trajectory(optim::AdamOptions{.lr = 0.05, .betas = {0.8, 0.95}, .weight_decay = 0.1, .amsgrad = true});
}

TEST_P(AdamTest, AdamWDecaysTheParameterDirectly) {
  expect_trajectory(optim::AdamWOptions{.lr = 0.05, .weight_decay = 0.5});
}

TEST_P(AdamTest, AdamWWithAmsgradAndALargeEps) {
  expect_trajectory(optim::AdamWOptions{.lr = 0.05, .eps = 0.5, .weight_decay = 0.2, .amsgrad = true});
}

TEST_P(AdamTest, SmallBeta1TakesTheOtherFormOfLerp) {
  expect_trajectory(optim::AdamOptions{.lr = 0.05, .betas = {0.3, 0.9}});
}

TEST_P(AdamTest, TheTwoWeightDecaysDiffer) {
  // One step from p = 2 with grad 0 and weight decay 0.5, lr 0.1: Adam's L2 term makes g = 1, so p moves by a full
  // normalized step, 2 - 0.1 = 1.9 (up to eps); AdamW shrinks p to 2 * (1 - 0.05) = 1.9 and then, with g = 0,
  // moves no further: 1.9 exactly.
  Tensor a = Tensor::from_vector({2.0f}, {1}, device()).set_requires_grad(true);
  Tensor w = Tensor::from_vector({2.0f}, {1}, device()).set_requires_grad(true);
  optim::Adam adam({a}, {.lr = 0.1, .weight_decay = 0.5});
  optim::AdamW adamw({w}, {.lr = 0.1, .weight_decay = 0.5});
  a.set_grad(Tensor::zeros({1}, device()));
  w.set_grad(Tensor::zeros({1}, device()));
  adam.step();
  adamw.step();
  expect_values(a, {1.9}, {1}, 0, 1e-6);
  EXPECT_EQ(w.to_vector(), std::vector<float>{static_cast<float>(2.0f * static_cast<float>(1.0 - 0.1 * 0.5))});
}

TEST_P(AdamTest, EachParameterCountsOnlyItsOwnSteps) {
  // b has no gradient for the first two steps: its bias correction then starts at t = 1, as in PyTorch.
  const Quadratic q;
  Tensor a = Tensor::from_vector(to_float(q.start), {6}, device()).set_requires_grad(true);
  Tensor b = Tensor::from_vector(to_float(q.start), {6}, device()).set_requires_grad(true);
  const optim::AdamOptions options{.lr = 0.1};
  optim::Adam adam({a, b}, options);
  AdamReference ra = reference_for(options), rb = reference_for(options);
  std::vector<double> pa = q.start, pb = q.start;
  for (int k = 0; k < 5; ++k) {
    set_quadratic_grad(a, q);
    ra.step(pa, q.gradient(to_double(a)));
    if (k >= 2) {
      set_quadratic_grad(b, q);
      rb.step(pb, q.gradient(to_double(b)));
    }
    adam.step();
  }
  EXPECT_EQ(adam.step_count(0), 5);
  EXPECT_EQ(adam.step_count(1), 3);
  expect_values(a, pa, {6}, kRtol, kAtol);
  expect_values(b, pb, {6}, kRtol, kAtol);
  EXPECT_ERROR(adam.step_count(2), "optim::Adam::step_count: parameter 2 but there are 2");
}

TEST_P(AdamTest, ParameterGroupsFollowTheirOwnOptions) {
  const Quadratic q;
  Tensor body = Tensor::from_vector(to_float(q.start), {6}, device()).set_requires_grad(true);
  Tensor head = Tensor::from_vector(to_float(q.start), {6}, device()).set_requires_grad(true);
  const optim::AdamWOptions defaults{.lr = 0.02};
  const optim::AdamWOptions head_options{.lr = 0.1, .weight_decay = 0.0, .amsgrad = true};
  optim::AdamW adamw({{.parameters = {body}}, {.parameters = {head}, .options = head_options}}, defaults);
  ASSERT_EQ(adamw.param_group_count(), 2u);
  EXPECT_EQ(adamw.options(0).lr, 0.02);
  EXPECT_EQ(adamw.options(0).weight_decay, 1e-2);  // the defaults' own default
  EXPECT_TRUE(adamw.options(1).amsgrad);
  AdamReference r_body = reference_for(defaults), r_head = reference_for(head_options);
  std::vector<double> p_body = q.start, p_head = q.start;
  for (int k = 0; k < 10; ++k) {
    if (k == 5) {  // a schedule changes one group's lr
      adamw.set_lr(1, 0.05);
      r_head.lr = 0.05;
    }
    set_quadratic_grad(body, q);
    set_quadratic_grad(head, q);
    r_body.step(p_body, q.gradient(to_double(body)));
    r_head.step(p_head, q.gradient(to_double(head)));
    adamw.step();
  }
  expect_values(body, p_body, {6}, kRtol, kAtol);
  expect_values(head, p_head, {6}, kRtol, kAtol);
  EXPECT_EQ(adamw.lr(0), 0.02);
  EXPECT_EQ(adamw.lr(1), 0.05);
  EXPECT_ERROR(adamw.options(2), "optim::AdamW::options: group 2 but there are 2 parameter groups");
}

TEST_P(AdamTest, ParametersWithoutGradientAreLeftAlone) {
  Tensor p = Tensor::from_vector({1.0f, 2.0f}, {2}, device()).set_requires_grad(true);
  optim::AdamW adamw({p}, {});
  adamw.step();  // no gradient: not even the decoupled decay applies
  EXPECT_EQ(p.to_vector(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(adamw.step_count(0), 0);
  EXPECT_TRUE(adamw.state_dict().parameters[0].tensors.empty());
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(AdamTest);

// Note [Rounding like the CPU] in the CUDA kernels: the same inputs give bitwise the same parameters on both
// backends, which the replicated path relies on when replicas live on different kinds of device.
TEST(AdamDevices, CpuAndCudaAgreeBitwise_CUDA) {
  TANDEM_REQUIRE_GPUS(1);
  const Quadratic q;
  for (bool amsgrad : {false, true}) {
    Tensor on_cpu = Tensor::from_vector(to_float(q.start), {6}).set_requires_grad(true);
    Tensor on_gpu = Tensor::from_vector(to_float(q.start), {6}, Device::cuda(0)).set_requires_grad(true);
    const optim::AdamWOptions options{.lr = 0.07, .betas = {0.3, 0.99}, .weight_decay = 0.1, .amsgrad = amsgrad};
    optim::AdamW cpu({on_cpu}, options), gpu({on_gpu}, options);
    for (int k = 0; k < 20; ++k) {
      const std::vector<float> g = to_float(q.gradient(to_double(on_cpu)));
      on_cpu.set_grad(Tensor::from_vector(g, {6}));
      on_gpu.set_grad(Tensor::from_vector(g, {6}, Device::cuda(0)));
      cpu.step();
      gpu.step();
      ASSERT_EQ(on_cpu.to_vector(), on_gpu.to_vector()) << "step " << k + 1 << " amsgrad " << amsgrad;
    }
  }
}

TEST(AdamErrors, OptionsAreValidatedAsPyTorchDoes) {
  Tensor p = Tensor::ones({2}).set_requires_grad(true);
  EXPECT_ERROR(optim::Adam({p}, {.lr = -1}), "optim::Adam: lr must be >= 0, got -1");
  EXPECT_ERROR(optim::Adam({p}, {.lr = std::nan("")}), "optim::Adam: lr must be >= 0, got nan");
  EXPECT_ERROR(optim::Adam({p}, {.betas = {1.0, 0.999}}), "optim::Adam: betas[0] must be in [0, 1), got 1");
  EXPECT_ERROR(optim::AdamW({p}, {.betas = {0.9, -0.5}}), "optim::AdamW: betas[1] must be in [0, 1), got -0.5");
  EXPECT_ERROR(optim::Adam({p}, {.eps = -1e-8}), "optim::Adam: eps must be >= 0, got -1e-08");
  EXPECT_ERROR(optim::AdamW({p}, {.weight_decay = -0.1}), "optim::AdamW: weight_decay must be >= 0, got -0.1");
  EXPECT_ERROR(optim::Adam({}, {}), "optim::Adam: got an empty parameter list");
  EXPECT_ERROR(optim::Adam({p, p}, {}), "optim::Adam: parameters 0 and 1 are the same tensor");
  EXPECT_ERROR(optim::AdamW({{.parameters = {p}}, {.parameters = {p}}}, {}),
               "optim::AdamW: parameters 0 and 1 are the same tensor");
  EXPECT_ERROR(optim::AdamW({{.parameters = {p}, .options = optim::AdamWOptions{.lr = -2}}}, {}),
               "optim::AdamW: lr must be >= 0, got -2");

  optim::Adam adam({p}, {});
  EXPECT_ERROR(adam.set_lr(-0.5), "optim::Adam::set_lr: lr must be >= 0, got -0.5");
  EXPECT_ERROR(adam.set_lr(1, 0.5), "optim::Adam::set_lr: group 1 but there are 1 parameter groups");
  EXPECT_ERROR(adam.state(), "optim::Adam::state: its state has more than one tensor per parameter; use state_dict()");
  EXPECT_ERROR(adam.set_state({Tensor()}), "optim::Adam::set_state: its state has more than one tensor per parameter");
}

}  // namespace
}  // namespace tandem

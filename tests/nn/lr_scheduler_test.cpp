// LR schedulers against their closed forms, computed here in double: StepLR, CosineAnnealingLR, LinearLR,
// SequentialLR chaining them, custom schedules; the initial lrs of several groups; resuming at an epoch; errors.
#include <cmath>
#include <numbers>

#include "support/test_support.h"
#include "support/velocity_optimizer.h"

namespace tandem {
namespace {

constexpr double kPi = std::numbers::pi;

// An SGD over two groups with lrs 0.1 and 0.4.
struct TwoGroups {
  Tensor a = Tensor::ones({2}).set_requires_grad(true);
  Tensor b = Tensor::ones({3}).set_requires_grad(true);
  optim::SGD sgd{{{.parameters = {a}}, {.parameters = {b}, .options = optim::SGDOptions{.lr = 0.4}}},
                 optim::SGDOptions{.lr = 0.1}};
};

// Steps `scheduler` through epochs 0..epochs-1 and expects each group's lr to be closed_form(epoch, base_lr).
void expect_schedule(optim::LRScheduler& scheduler, optim::Optimizer& optimizer, const std::vector<double>& base_lrs,
                     int64_t epochs, const std::function<double(int64_t, double)>& closed_form) {
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    if (epoch > 0) scheduler.step();
    ASSERT_EQ(scheduler.last_epoch(), epoch);
    for (size_t group = 0; group < base_lrs.size(); ++group) {
      const double expected = closed_form(epoch, base_lrs[group]);
      EXPECT_NEAR(optimizer.lr(group), expected, 1e-15) << "epoch " << epoch << " group " << group;
      EXPECT_EQ(scheduler.last_lr()[group], optimizer.lr(group));
    }
  }
}

TEST(LRScheduler, StepLRMultipliesByGammaEveryStepSize) {
  TwoGroups net;
  optim::StepLR schedule(net.sgd, /*step_size=*/3, /*gamma=*/0.5);
  expect_schedule(schedule, net.sgd, {0.1, 0.4}, 12,
                  [](int64_t e, double base) { return base * std::pow(0.5, static_cast<double>(e / 3)); });
  EXPECT_DOUBLE_EQ(net.sgd.lr(0), 0.1 / 8);  // epoch 11: three decays
}

TEST(LRScheduler, CosineAnnealingLRFollowsTheHalfCosineAndRepeats) {
  TwoGroups net;
  optim::CosineAnnealingLR schedule(net.sgd, /*t_max=*/10, /*eta_min=*/0.01);
  const auto closed_form = [](int64_t e, double base) {
    return 0.01 + (base - 0.01) * (1 + std::cos(kPi * static_cast<double>(e) / 10)) / 2;
  };
  expect_schedule(schedule, net.sgd, {0.1, 0.4}, 31, closed_form);
  schedule.set_last_epoch(5);  // half way: the mean of base and eta_min
  EXPECT_NEAR(net.sgd.lr(1), (0.4 + 0.01) / 2, 1e-15);
  schedule.set_last_epoch(10);  // t_max: eta_min
  EXPECT_NEAR(net.sgd.lr(0), 0.01, 1e-15);
  schedule.set_last_epoch(20);  // back at the base lr, as PyTorch's schedule past t_max
  EXPECT_NEAR(net.sgd.lr(0), 0.1, 1e-15);
}

TEST(LRScheduler, LinearLRWarmsUpThenHolds) {
  TwoGroups net;
  optim::LinearLR warmup(net.sgd, /*start_factor=*/0.25, /*end_factor=*/1.0, /*total_iters=*/4);
  EXPECT_DOUBLE_EQ(net.sgd.lr(0), 0.025);  // set on construction
  expect_schedule(warmup, net.sgd, {0.1, 0.4}, 10, [](int64_t e, double base) {
    return base * (0.25 + 0.75 * static_cast<double>(std::min<int64_t>(e, 4)) / 4);
  });
  EXPECT_DOUBLE_EQ(net.sgd.lr(1), 0.4);
}

TEST(LRScheduler, LinearLRDefaultsArePyTorchs) {
  TwoGroups net;
  optim::LinearLR schedule(net.sgd);  // start 1/3, end 1, 5 iterations
  expect_schedule(schedule, net.sgd, {0.1, 0.4}, 8, [](int64_t e, double base) {
    return base * (1.0 / 3 + (1 - 1.0 / 3) * static_cast<double>(std::min<int64_t>(e, 5)) / 5);
  });
}

TEST(LRScheduler, SequentialLRSwitchesAtMilestonesAndRestartsTheNextSchedule) {
  TwoGroups net;
  // As in PyTorch, each scheduler built over the optimizer sets its own epoch 0, yet all start from the initial lrs.
  optim::LinearLR warmup(net.sgd, 0.1, 1.0, 3);
  optim::CosineAnnealingLR cosine(net.sgd, 8);
  optim::StepLR decay(net.sgd, 2, 0.5);
  optim::SequentialLR schedule(net.sgd, {&warmup, &cosine, &decay}, {3, 11});
  expect_schedule(schedule, net.sgd, {0.1, 0.4}, 20, [](int64_t e, double base) {
    if (e < 3) return base * (0.1 + 0.9 * static_cast<double>(e) / 3);
    if (e < 11) return base * (1 + std::cos(kPi * static_cast<double>(e - 3) / 8)) / 2;
    return base * std::pow(0.5, static_cast<double>((e - 11) / 2));
  });
  EXPECT_EQ(net.sgd.initial_lrs(), (std::vector<double>{0.1, 0.4}));
}

TEST(LRScheduler, TheOptimizerStepsWithTheScheduledLr) {
  Tensor p = Tensor::from_vector({1.0f}, {1}).set_requires_grad(true);
  optim::SGD sgd({p}, {.lr = 1.0});
  optim::StepLR schedule(sgd, 1, 0.5);
  schedule.step();  // lr 0.5
  p.set_grad(Tensor::ones({1}));
  sgd.step();
  testing::expect_values(p, {0.5}, {1});
  EXPECT_EQ(sgd.options().lr, 0.5);
}

TEST(LRScheduler, ResumingAtAnEpochGivesThatEpochsLrs) {
  TwoGroups first, second;
  optim::CosineAnnealingLR running(first.sgd, 7);
  for (int i = 0; i < 4; ++i) running.step();
  optim::CosineAnnealingLR resumed(second.sgd, 7);
  resumed.set_last_epoch(running.last_epoch());
  EXPECT_EQ(resumed.last_lr(), running.last_lr());
  running.step();
  resumed.step();
  EXPECT_EQ(second.sgd.lr(1), first.sgd.lr(1));
}

TEST(LRScheduler, CustomSchedulesAreCheckedBeforeAnyLrIsSet) {
  TwoGroups net;
  optim::LRScheduler custom(net.sgd, [](int64_t e, double base) { return base - 0.15 * static_cast<double>(e); });
  EXPECT_DOUBLE_EQ(custom.lr_at(2, 1.0), 0.7);
  // Epoch 1 would give group 0 a negative lr: nothing changes.
  EXPECT_ERROR(custom.step(),
               "optim::LRScheduler: the schedule gives lr -0.05 for group 0 at epoch 1 but expected a "
               "value >= 0");
  EXPECT_EQ(custom.last_epoch(), 0);
  EXPECT_EQ(net.sgd.lr(0), 0.1);
  EXPECT_EQ(net.sgd.lr(1), 0.4);
  EXPECT_ERROR(optim::LRScheduler(net.sgd, nullptr), "optim::LRScheduler: the schedule is empty");
  EXPECT_ERROR(custom.set_last_epoch(-1), "optim::LRScheduler::set_last_epoch: epoch must be >= 0, got -1");
}

TEST(LRScheduler, OptionsAreValidated) {
  TwoGroups net;
  EXPECT_ERROR(optim::StepLR(net.sgd, 0), "optim::StepLR: step_size must be >= 1, got 0");
  EXPECT_ERROR(optim::StepLR(net.sgd, 2, -0.1), "optim::StepLR: gamma must be >= 0, got -0.1");
  EXPECT_ERROR(optim::CosineAnnealingLR(net.sgd, 0), "optim::CosineAnnealingLR: t_max must be >= 1, got 0");
  EXPECT_ERROR(optim::CosineAnnealingLR(net.sgd, 5, -1), "optim::CosineAnnealingLR: eta_min must be >= 0, got -1");
  EXPECT_ERROR(optim::LinearLR(net.sgd, 0.0), "optim::LinearLR: start_factor must be in (0, 1], got 0");
  EXPECT_ERROR(optim::LinearLR(net.sgd, 1.5), "optim::LinearLR: start_factor must be in (0, 1], got 1.5");
  EXPECT_ERROR(optim::LinearLR(net.sgd, 0.5, 1.1), "optim::LinearLR: end_factor must be in [0, 1], got 1.1");
  EXPECT_ERROR(optim::LinearLR(net.sgd, 0.5, 1.0, 0), "optim::LinearLR: total_iters must be >= 1, got 0");

  optim::StepLR a(net.sgd, 2);
  optim::StepLR b(net.sgd, 3);
  TwoGroups other;
  optim::StepLR elsewhere(other.sgd, 2);
  EXPECT_ERROR(optim::SequentialLR(net.sgd, {}, {}), "optim::SequentialLR: got no schedulers");
  EXPECT_ERROR(optim::SequentialLR(net.sgd, {&a, nullptr}, {2}), "optim::SequentialLR: scheduler 1 is null");
  EXPECT_ERROR(optim::SequentialLR(net.sgd, {&a, &elsewhere}, {2}),
               "optim::SequentialLR: scheduler 1 drives another optimizer than the one given");
  EXPECT_ERROR(optim::SequentialLR(net.sgd, {&a, &b}, {2, 4}),
               "optim::SequentialLR: got 2 milestones for 2 schedulers; expected one fewer milestones than schedulers");
  EXPECT_ERROR(optim::SequentialLR(net.sgd, {&a, &b, &a}, {4, 4}),
               "optim::SequentialLR: milestone 1 is 4 but milestones must be > 0 and strictly increasing");
  EXPECT_ERROR(optim::SequentialLR(net.sgd, {&a, &b}, {0}),
               "optim::SequentialLR: milestone 0 is 0 but milestones must be > 0 and strictly increasing");
}

// An optimizer with no learning rate (one written for the tests) cannot be scheduled.
TEST(LRScheduler, AnOptimizerWithoutLearningRatesIsRefused) {
  Tensor p = Tensor::ones({1}).set_requires_grad(true);
  testing::VelocityOptimizer velocity({p}, 0.1f, 0.5f);
  EXPECT_ERROR(optim::StepLR(velocity, 2), "VelocityOptimizer has no learning rate");
}

}  // namespace
}  // namespace tandem

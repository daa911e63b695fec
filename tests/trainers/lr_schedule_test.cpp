// parse_lr_schedule: the grammar's schedules over an optimizer, and its errors.

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

std::vector<double> lrs(const std::string& text, int64_t epochs) {
  Tensor w = Tensor::zeros({1});
  w.set_requires_grad(true);
  optim::SGD sgd({w}, {.lr = 1.0});
  const std::optional<LrSchedule> schedule = parse_lr_schedule(text, epochs);
  if (!schedule) return {};
  const std::unique_ptr<optim::LRScheduler> scheduler = schedule->make(sgd);
  std::vector<double> values;
  for (int64_t e = 0; e < epochs; ++e) {
    scheduler->set_last_epoch(e);
    values.push_back(sgd.lr(0));
  }
  return values;
}

TEST(LrSchedule, GrammarGivesTheDocumentedLearningRates) {
  EXPECT_FALSE(parse_lr_schedule("none", 10).has_value());
  EXPECT_EQ(lrs("step:2:0.5", 5), (std::vector<double>{1, 1, 0.5, 0.5, 0.25}));
  const std::vector<double> cosine = lrs("cosine", 4);
  EXPECT_NEAR(cosine[2], 0.5, 1e-12);
  EXPECT_EQ(lrs("warmup:3", 5), (std::vector<double>{0.25, 0.5, 0.75, 1, 1}));
  const std::vector<double> warm_cosine = lrs("warmup:1+cosine", 5);  // then a cosine over 4 epochs
  EXPECT_NEAR(warm_cosine[0], 0.5, 1e-12);
  EXPECT_NEAR(warm_cosine[1], 1.0, 1e-12);
  EXPECT_NEAR(warm_cosine[3], 0.5, 1e-12);
  EXPECT_EQ(parse_lr_schedule("warmup:1+cosine", 5)->name, "warmup:1+cosine (t_max 4)");
  EXPECT_EQ(lrs("warmup:1+step:1:0.5", 3), (std::vector<double>{0.5, 1, 0.5}));
}

TEST(LrSchedule, RefusesTextOutsideTheGrammar) {
  EXPECT_ERROR(parse_lr_schedule("cos", 10),
               "parse_lr_schedule: \"cos\" is not a schedule; expected none, step:S:GAMMA");
  EXPECT_ERROR(parse_lr_schedule("step:3", 10), "has no GAMMA after step:S");
  EXPECT_ERROR(parse_lr_schedule("step:3:1.5", 10), "has gamma \"1.5\" but expected a number in (0, 1]");
  EXPECT_ERROR(parse_lr_schedule("step:x:0.5", 10), "has step size \"x\" but expected an integer");
  EXPECT_ERROR(parse_lr_schedule("warmup:10+cosine", 10),
               "has warm-up epochs \"10\" but expected an integer in [1, 9]");
  EXPECT_ERROR(parse_lr_schedule("warmup:2+none", 10), "\"warmup:2+none\" is not a schedule");
  EXPECT_ERROR(parse_lr_schedule("cosine", 0), "epochs is 0 but expected at least 1");
}

}  // namespace
}  // namespace tandem::trainers

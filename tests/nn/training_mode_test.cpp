// Training modes: per-module flags in pre-order, the change counter replicas rely on, and TrainingModeGuard.
#include <stdexcept>

#include "support/test_support.h"

namespace tandem {
namespace {

// net = Sequential(Linear, Sequential(Tanh, Linear)): pre-order net, 0, 1, 1.0, 1.1.
std::shared_ptr<nn::Sequential> make_tree() {
  auto inner = std::make_shared<nn::Sequential>(
      nn::Sequential{std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(2, 1)});
  return std::make_shared<nn::Sequential>(nn::Sequential{std::make_shared<nn::Linear>(2, 2), inner});
}

TEST(TrainingModeTest, ModesAreListedAndSetInPreOrder) {
  auto net = make_tree();
  EXPECT_EQ(net->training_modes(), (std::vector<bool>{true, true, true, true, true}));
  (*net)[1]->eval();
  EXPECT_EQ(net->training_modes(), (std::vector<bool>{true, true, false, false, false}));
  net->set_training_modes({false, true, true, false, true});
  EXPECT_FALSE(net->is_training());
  EXPECT_TRUE((*net)[0]->is_training());
  auto inner = std::dynamic_pointer_cast<nn::Sequential>((*net)[1]);
  EXPECT_TRUE(inner->is_training());
  EXPECT_FALSE((*inner)[0]->is_training());
  EXPECT_TRUE((*inner)[1]->is_training());
  EXPECT_ERROR(net->set_training_modes({true, true}),
               "nn::Module::set_training_modes: got 2 modes but Sequential has 5 modules");
  EXPECT_EQ(net->training_modes(), (std::vector<bool>{false, true, true, false, true}));  // unchanged
}

TEST(TrainingModeTest, TheGenerationChangesExactlyWhenAFlagChanges) {
  auto net = make_tree();
  const uint64_t start = nn::Module::training_mode_generation();
  net->train();  // already training everywhere
  net->set_training_modes(net->training_modes());
  EXPECT_EQ(nn::Module::training_mode_generation(), start);
  (*net)[0]->eval();
  const uint64_t after_eval = nn::Module::training_mode_generation();
  EXPECT_NE(after_eval, start);
  net->train();
  EXPECT_NE(nn::Module::training_mode_generation(), after_eval);
}

TEST(TrainingModeTest, TheGuardRestoresEveryModulesOwnMode) {
  auto net = make_tree();
  (*net)[0]->eval();
  const std::vector<bool> before = net->training_modes();
  {
    nn::TrainingModeGuard eval_mode(*net, false);
    EXPECT_EQ(net->training_modes(), std::vector<bool>(5, false));
  }
  EXPECT_EQ(net->training_modes(), before);
  {
    nn::TrainingModeGuard train_mode(*net, true);
    EXPECT_EQ(net->training_modes(), std::vector<bool>(5, true));
  }
  EXPECT_EQ(net->training_modes(), before);
}

TEST(TrainingModeTest, TheGuardRestoresOnAnException) {
  auto net = make_tree();
  try {
    nn::TrainingModeGuard eval_mode(*net, false);
    throw std::runtime_error("forward failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(net->training_modes(), std::vector<bool>(5, true));
}

TEST(TrainingModeTest, TheGuardFallsBackToTheRootsModeWhenTheTreeChanged) {
  auto net = make_tree();
  (*net)[0]->eval();
  {
    nn::TrainingModeGuard eval_mode(*net, false);
    net->push_back(std::make_shared<nn::ReLU>());
  }
  EXPECT_EQ(net->training_modes(), std::vector<bool>(6, true));
}

TEST(TrainingModeTest, ClonesCopyTheModes) {
  auto net = make_tree();
  (*net)[1]->eval();
  EXPECT_EQ(net->clone()->training_modes(), net->training_modes());
}

}  // namespace
}  // namespace tandem

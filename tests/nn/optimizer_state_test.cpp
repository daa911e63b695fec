// Optimizer state by name (state_dict / load_state_dict) and its safetensors form: a saved Adam state loaded into a
// fresh optimizer continues bitwise like the original; SGD's and a plain Optimizer's state; wrong states and hostile
// files are refused with nothing changed.

#include <limits>

#include "adam_reference.h"
#include "support/test_support.h"
#include "support/velocity_optimizer.h"

namespace tandem {
namespace {

using testing::Quadratic;
using testing::to_double;

std::vector<float> to_float(const std::vector<double>& values) { return {values.begin(), values.end()}; }

// Two parameters of the quadratic problem (adam_reference.h), one per group.
struct Problem {
  Quadratic q;  // first: a and b start from it
  Tensor a, b;
  explicit Problem(Device device)
      : a(Tensor::from_vector(to_float(q.start), {2, 3}, device).set_requires_grad(true)),
        b(Tensor::from_vector(to_float(q.target), {6}, device).set_requires_grad(true)) {}
  void set_grads() const {
    a.set_grad(Tensor::from_vector(to_float(q.gradient(to_double(a))), a.shape(), a.device()));
    b.set_grad(Tensor::from_vector(to_float(q.gradient(to_double(b))), b.shape(), b.device()));
  }
};

optim::AdamW make_adamw(const Problem& problem) {
  return optim::AdamW({{.parameters = {problem.a}, .options = optim::AdamWOptions{.lr = 0.05, .amsgrad = true}},
                       {.parameters = {problem.b}}},
                      {.lr = 0.02, .weight_decay = 0.1});
}

class OptimizerStateTest : public testing::EveryDevice {};

TEST_P(OptimizerStateTest, AdamStateSavedAndLoadedContinuesBitwiseLikeTheOriginal) {
  Problem original(device());
  optim::AdamW adamw = make_adamw(original);
  for (int k = 0; k < 3; ++k) {
    original.set_grads();
    adamw.step();
  }
  const std::string path = testing::scratch_path("adamw.safetensors");
  optim::save_optimizer_state(adamw.state_dict(), path);

  Problem resumed(device());
  resumed.a.detach().copy_(original.a);
  resumed.b.detach().copy_(original.b);
  optim::AdamW fresh = make_adamw(resumed);
  const optim::OptimizerState loaded = optim::load_optimizer_state(path);
  EXPECT_EQ(loaded.kind, "optim::AdamW");
  ASSERT_EQ(loaded.parameters.size(), 2u);
  EXPECT_EQ(loaded.parameters[0].tensors.size(), 3u);  // amsgrad group: exp_avg, exp_avg_sq, max_exp_avg_sq
  EXPECT_EQ(loaded.parameters[1].tensors.size(), 2u);
  fresh.load_state_dict(loaded);
  EXPECT_EQ(fresh.step_count(0), 3);
  EXPECT_EQ(fresh.state_dict().parameters[0].tensors[0].second.device(), device());
  for (int k = 0; k < 4; ++k) {
    original.set_grads();
    resumed.set_grads();
    adamw.step();
    fresh.step();
    ASSERT_EQ(original.a.to_vector(), resumed.a.to_vector()) << "step " << k;
    ASSERT_EQ(original.b.to_vector(), resumed.b.to_vector()) << "step " << k;
  }
  EXPECT_EQ(fresh.step_count(1), 7);
  std::remove(path.c_str());
}

TEST_P(OptimizerStateTest, SgdStateDictHoldsItsMomentumBuffers) {
  Tensor p = Tensor::from_vector({1.0f, 2.0f}, {2}, device()).set_requires_grad(true);
  Tensor q = Tensor::from_vector({3.0f}, {1}, device()).set_requires_grad(true);
  optim::SGD sgd({p, q}, {.lr = 0.1, .momentum = 0.9});
  p.set_grad(Tensor::from_vector({2.0f, 4.0f}, {2}, device()));
  sgd.step();
  const optim::OptimizerState state = sgd.state_dict();
  EXPECT_EQ(state.kind, "optim::SGD");
  ASSERT_EQ(state.parameters[0].tensors.size(), 1u);
  EXPECT_EQ(state.parameters[0].tensors[0].first, "momentum_buffer");
  EXPECT_TRUE(state.parameters[1].tensors.empty());  // q never had a gradient

  const std::string path = testing::scratch_path("sgd.safetensors");
  optim::save_optimizer_state(state, path);
  optim::SGD fresh({p, q}, {.lr = 0.1, .momentum = 0.9});
  fresh.load_state_dict(optim::load_optimizer_state(path));
  testing::expect_values(fresh.momentum_buffers()[0], {2, 4}, {2});
  EXPECT_FALSE(fresh.momentum_buffers()[1].defined());
  EXPECT_FALSE(fresh.momentum_buffers()[0].shares_storage_with(sgd.momentum_buffers()[0]));
  std::remove(path.c_str());
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(OptimizerStateTest);

TEST(OptimizerState, AnOptimizerWithOnlyStateHasADefaultStateDict) {
  Tensor p = Tensor::ones({2}).set_requires_grad(true);
  testing::VelocityOptimizer velocity({p}, 0.1f, 0.5f);
  p.set_grad(Tensor::full({2}, 3.0f));
  velocity.step();
  const optim::OptimizerState state = velocity.state_dict();
  EXPECT_EQ(state.kind, "VelocityOptimizer");
  ASSERT_EQ(state.parameters[0].tensors.size(), 1u);
  EXPECT_EQ(state.parameters[0].tensors[0].first, "state");
  testing::VelocityOptimizer other({p}, 0.1f, 0.5f);
  other.load_state_dict(state);
  testing::expect_values(other.state()[0], {3, 3}, {2});
  EXPECT_ERROR(other.load_state_dict({.kind = "VelocityOptimizer",
                                      .version = 1,
                                      .parameters = {{.step = 0, .tensors = {{"velocity", Tensor::ones({2})}}}}}),
               "VelocityOptimizer::load_state_dict: parameter 0 has the slot \"velocity\" but expected at most one "
               "\"state\"");
}

TEST(OptimizerState, WrongStatesAreRefusedAndLeaveTheOptimizerAsItWas) {
  Problem problem(Device::cpu());
  optim::AdamW adamw = make_adamw(problem);
  problem.set_grads();
  adamw.step();
  const optim::OptimizerState good = adamw.state_dict();
  const auto refused = [&](optim::OptimizerState state, const std::string& fragment) {
    EXPECT_ERROR(adamw.load_state_dict(state), fragment);
    EXPECT_EQ(adamw.state_dict().parameters[0].tensors[0].second.to_vector(),
              good.parameters[0].tensors[0].second.to_vector());
    EXPECT_EQ(adamw.step_count(0), 1);
  };
  optim::OptimizerState state = good;
  state.kind = "optim::Adam";
  refused(state,
          "optim::AdamW::load_state_dict: got the state of \"optim::Adam\" version 1 but expected "
          "\"optim::AdamW\" version 1");
  state = good;
  state.version = 2;
  refused(state, "got the state of \"optim::AdamW\" version 2 but expected \"optim::AdamW\" version 1");
  state = good;
  state.parameters.pop_back();
  refused(state, "optim::AdamW::load_state_dict: got the state of 1 parameters for 2");
  state = good;
  state.parameters[1].step = -3;
  refused(state,
          "optim::AdamW::load_state_dict: parameter 1 has step -3 but expected a count in [0, 9007199254740992]");
  state = good;
  state.parameters[1].step = std::numeric_limits<int64_t>::max();  // one more step would overflow
  refused(state,
          "optim::AdamW::load_state_dict: parameter 1 has step 9223372036854775807 but expected a count in [0, "
          "9007199254740992]");
  state = good;
  state.parameters[0].tensors.pop_back();  // the amsgrad group's max_exp_avg_sq
  refused(state,
          "optim::AdamW::load_state_dict: parameter 0 has step 1 but not all of the slots exp_avg, "
          "exp_avg_sq and max_exp_avg_sq (amsgrad)");
  state = good;
  state.parameters[1].tensors.emplace_back("max_exp_avg_sq", Tensor::zeros({6}));
  refused(state,
          "optim::AdamW::load_state_dict: parameter 1 has the slot \"max_exp_avg_sq\" but expected the slots "
          "exp_avg and exp_avg_sq");
  state = good;
  state.parameters[1].tensors.emplace_back("exp_avg", Tensor::zeros({6}));
  refused(state, "parameter 1 has the slot \"exp_avg\" but expected the slots exp_avg and exp_avg_sq");
  state = good;
  state.parameters[1].step = 0;
  refused(state, "parameter 1 has the slot \"exp_avg\" but expected the slots none (step 0)");
  state = good;
  state.parameters[1].tensors[1].second = Tensor::zeros({2, 3});
  refused(state,
          "optim::AdamW::load_state_dict: exp_avg_sq of parameter 1 has shape [2, 3] but the parameter has "
          "shape [6]");
  state = good;
  state.parameters[1].tensors[1].second = Tensor::from_vector({0, 0, -1, 0, 0, 0}, {6});  // finite, yet impossible
  refused(state,
          "optim::AdamW::load_state_dict: exp_avg_sq of parameter 1 holds -1 but expected values >= 0 (an average of "
          "squared gradients)");
  state = good;
  state.parameters[0].tensors[0].second = Tensor();
  refused(state, "optim::AdamW::load_state_dict: exp_avg of parameter 0 is undefined");

  optim::SGD sgd({problem.a, problem.b}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_ERROR(sgd.load_state_dict(good), "optim::SGD::load_state_dict: got the state of \"optim::AdamW\"");
}

TEST(OptimizerStateFile, ReadingTakesOnlyTheOptimizerEntriesOfALargerFile) {
  Problem problem(Device::cpu());
  optim::Adam adam({problem.a, problem.b}, {});
  problem.set_grads();
  adam.step();
  TensorFile file;
  file.tensors = {{"model.a", problem.a}, {"model.b", problem.b}};
  file.metadata["note"] = "kept";
  optim::write_optimizer_state(adam.state_dict(), file);
  EXPECT_ERROR(optim::write_optimizer_state(adam.state_dict(), file),
               "write_optimizer_state: the file already holds an optimizer state");
  const std::string path = testing::scratch_path("checkpoint.safetensors");
  save_tensors(file.tensors, path, file.metadata);

  TensorFile loaded = load_tensors(path);
  const optim::OptimizerState state = optim::read_optimizer_state(loaded, "test");
  EXPECT_EQ(state.parameters[1].step, 1);
  ASSERT_EQ(loaded.tensors.size(), 2u);
  EXPECT_EQ(loaded.tensors[0].first, "model.a");
  EXPECT_EQ(loaded.metadata, (std::map<std::string, std::string>{{"note", "kept"}}));
  EXPECT_ERROR(optim::load_optimizer_state(path),
               "load_optimizer_state: '" + path + "' has an unexpected tensor \"model.a\"");
  optim::Adam fresh({problem.a, problem.b}, {});
  fresh.load_state_dict(state);
  EXPECT_EQ(fresh.step_count(0), 1);
  std::remove(path.c_str());
}

TEST(OptimizerStateFile, BadStatesAreNotWritten) {
  TensorFile file;
  optim::OptimizerState state{.kind = "k", .version = 1, .parameters = {{.step = -1, .tensors = {}}}};
  EXPECT_ERROR(optim::write_optimizer_state(state, file),
               "write_optimizer_state: parameter 0 has step -1 but expected a count in [0, 9007199254740992]");
  state.parameters[0].step = optim::kMaxSteps + 1;
  EXPECT_ERROR(optim::write_optimizer_state(state, file),
               "write_optimizer_state: parameter 0 has step 9007199254740993 but expected a count in [0, "
               "9007199254740992]");
  state.parameters[0] = {.step = 1, .tensors = {{"m", Tensor::ones({1})}, {"m", Tensor::ones({1})}}};
  EXPECT_ERROR(optim::write_optimizer_state(state, file),
               "write_optimizer_state: parameter 0 has an empty or repeated slot name \"m\"");
  state.parameters[0] = {.step = 1, .tensors = {{"m", Tensor()}}};
  EXPECT_ERROR(optim::write_optimizer_state(state, file), "write_optimizer_state: parameter 0 slot m is undefined");
}

// Files written by hand: every field of the metadata and every tensor name is checked.
TEST(OptimizerStateFile, HostileFilesAreRefused) {
  const std::string path = testing::scratch_path("hostile.safetensors");
  const auto refused = [&](const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& metadata,
                           const std::string& fragment) {
    std::map<std::string, std::string> meta;
    if (!metadata.empty()) meta["tandem.optimizer"] = metadata;
    save_tensors(tensors, path, meta);
    EXPECT_ERROR(optim::load_optimizer_state(path), fragment);
  };
  const std::string where = "load_optimizer_state: '" + path + "': metadata tandem.optimizer: ";
  const std::string ok = R"({"format": "tandem-optimizer-state", "kind": "optim::Adam", "version": 1, "steps": [2]})";
  const Tensor t = Tensor::ones({2});
  refused({{"x", t}}, "", "load_optimizer_state: '" + path + "': holds no optimizer state (no \"tandem.optimizer\"");
  refused({}, "[1", where);
  refused({}, "[1]", where + "the metadata is a JSON array but expected an object");
  refused({}, R"({"format": "tandem-optimizer-state", "kind": "k", "version": 1, "steps": [], "extra": 0})",
          where + "the metadata has an unexpected field \"extra\"");
  refused({}, R"({"format": "tandem-optimizer-state", "kind": "k", "version": 1})",
          where + "the field \"steps\" is missing");
  refused({}, R"({"format": "other", "kind": "k", "version": 1, "steps": []})",
          where + "format is \"other\" but expected \"tandem-optimizer-state\"");
  refused({}, R"({"format": "tandem-optimizer-state", "kind": 7, "version": 1, "steps": []})",
          where + "kind is 7 but expected a string of at most 200 characters");
  refused({}, R"({"format": "tandem-optimizer-state", "kind": "k", "version": -1, "steps": []})",
          where + "version is -1 but expected an integer in [0, 9223372036854775807]");
  refused({}, R"({"format": "tandem-optimizer-state", "kind": "k", "version": 1, "steps": [1, 2.5]})",
          where + "steps[1] is 2.5 but expected an integer in [0, 9007199254740992]");
  refused({}, R"({"format": "tandem-optimizer-state", "kind": "k", "version": 1, "steps": [9223372036854775807]})",
          where + "steps[0] is 9223372036854775807 but expected an integer in [0, 9007199254740992]");
  refused({}, R"({"format": "tandem-optimizer-state", "kind": "k", "version": 1, "steps": {}})",
          where + "steps is a JSON object but expected an array of at most 1000000 step counts");
  const std::string bad_name = "load_optimizer_state: '" + path + "': the tensor ";
  for (const std::string name : {"optimizer.1.exp_avg", "optimizer.00.exp_avg", "optimizer.0.", "optimizer.0",
                                 "optimizer.x.exp_avg", "optimizer..exp_avg", "optimizer.99999999.m"}) {
    refused({{name, t}}, ok, bad_name + "\"" + name + "\" is not named optimizer.<parameter index>.<slot>");
  }
  refused({{"optimizer.0.exp_avg", t}, {"model.w", t}}, ok,
          "load_optimizer_state: '" + path + "' has an unexpected tensor \"model.w\"");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tandem

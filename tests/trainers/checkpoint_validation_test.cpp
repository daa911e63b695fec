// Checkpoints are files users share: their metadata is validated field by field, a resume loads all or nothing,
// and a checkpoint of another setup is refused with the differences listed.

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

using testing::diabetes;

TrainerOptions seed_options(int64_t epochs = 2) {
  TrainerOptions options;
  options.devices = {Device::cpu(0)};
  options.epochs = epochs;
  return options;
}

Trainer seed_net(TrainerOptions options = seed_options()) {
  manual_seed(0);
  return Trainer(make_mlp(10, 20), std::move(options));
}

std::vector<std::vector<float>> parameter_values(const Trainer& trainer) {
  std::vector<std::vector<float>> values;
  for (const Tensor& p : trainer.model()->parameters()) values.push_back(p.to_vector());
  return values;
}

// A checkpoint of two epochs of the seed net, as a tensor file to edit.
class CheckpointValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    Trainer trainer = seed_net();
    trainer.fit(diabetes().train);
    trainer.save_checkpoint(good_);
    file_ = load_tensors(good_);
    state_ = nlohmann::json::parse(file_.metadata.at("tandem.trainer"));
  }

  // Writes the checkpoint with `metadata` as its trainer metadata text and returns the path.
  std::string with_metadata(const std::string& metadata) {
    TensorFile edited = file_;
    edited.metadata["tandem.trainer"] = metadata;
    save_tensors(edited.tensors, edited_, edited.metadata);
    return edited_;
  }
  std::string with_state(const nlohmann::json& state) { return with_metadata(state.dump()); }
  // Writes `edited` with the checksum of its edited data recorded, as a file crafted to pass the checksum would be
  // (Note [Checkpoint checksums]): the checks of its structure must still refuse it.
  void save_sealed(TensorFile edited) {
    nlohmann::json state = nlohmann::json::parse(edited.metadata.at("tandem.trainer"));
    if (state.contains("checksum")) {
      state["checksum"] = checkpoint_checksum(edited);
      edited.metadata["tandem.trainer"] = state.dump();
    }
    save_tensors(edited.tensors, edited_, edited.metadata);
  }
  // The error of resuming a fresh seed net from `path`, whose parameters must be left untouched.
  std::string resume_error(const std::string& path, TrainerOptions options = seed_options()) {
    Trainer fresh = seed_net(std::move(options));
    const auto before = parameter_values(fresh);
    std::string message = "(no error)";
    try {
      fresh.load_checkpoint(path);
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_EQ(parameter_values(fresh), before) << "a refused checkpoint changed the model";
    EXPECT_EQ(fresh.epoch(), 0);
    return message;
  }

  const std::string good_ = testing::scratch_path("good.safetensors");
  const std::string edited_ = testing::scratch_path("edited.safetensors");
  TensorFile file_;
  nlohmann::json state_;
};

#define EXPECT_CONTAINS(text, fragment) EXPECT_NE((text).find(fragment), std::string::npos) << (text)

TEST_F(CheckpointValidation, FeatureStatisticsMustBeCompleteAndFinite) {
  nlohmann::json state = state_;
  state["standardizer"]["feature_scale"] = nlohmann::json::array();
  EXPECT_CONTAINS(resume_error(with_state(state)), "feature_scale is a JSON array of 0 entries but expected an array");
  state = state_;
  state["standardizer"]["feature_scale"].erase(3);
  EXPECT_CONTAINS(resume_error(with_state(state)), "feature_mean has 10 entries but feature_scale has 9");
  state = state_;
  state["standardizer"]["feature_scale"][2] = 0.0;
  EXPECT_CONTAINS(resume_error(with_state(state)), "feature_scale[2] is 0 but expected a positive number");
  state = state_;
  state["standardizer"]["feature_mean"][0] = "1.5";
  EXPECT_CONTAINS(resume_error(with_state(state)), "feature_mean[0] is \"1.5\" but expected a finite number");
  state = state_;
  state["standardizer"]["target_scale"] = -2.0;
  EXPECT_CONTAINS(resume_error(with_state(state)), "target_scale is -2 but expected a positive number");
  // Finite but absurd: no standard deviation is subnormal.
  state = state_;
  state["standardizer"]["target_scale"] = 1e-320;
  const std::string tiny = resume_error(with_state(state));
  EXPECT_CONTAINS(tiny, "target_scale is ");
  EXPECT_CONTAINS(tiny, " but expected a positive number of normal size (a standard deviation)");
}

TEST_F(CheckpointValidation, CountersMustBeIntegersInRange) {
  for (const char* field : {"epoch", "step", "shuffle_state"}) {
    SCOPED_TRACE(field);
    for (const char* bad : {"1e30", "-1", "2.5", "true", "18446744073709551616"}) {
      nlohmann::json state = state_;
      std::string text = state.dump();
      const std::string key = std::string("\"") + field + "\":";
      const size_t at = text.find(key) + key.size();
      text.replace(at, text.find_first_of(",}", at) - at, bad);
      EXPECT_CONTAINS(resume_error(with_metadata(text)), std::string(field) + " is ");
    }
  }
  nlohmann::json state = state_;
  state["epoch"] = uint64_t{1} << 63;
  EXPECT_CONTAINS(resume_error(with_state(state)), "epoch is 9223372036854775808 but expected an integer in [0, ");
  state = state_;
  state["generator"]["counter"] = 1.5;
  EXPECT_CONTAINS(resume_error(with_state(state)), "counter is 1.5 but expected an integer in [0, ");
  state = state_;
  state["step"] = 1;
  EXPECT_CONTAINS(resume_error(with_state(state)), "step is 1 but epoch is 2");
  // The trainer counts on from a loaded step: one at int64's end would overflow.
  state = state_;
  state["step"] = std::numeric_limits<int64_t>::max();
  EXPECT_CONTAINS(resume_error(with_state(state)),
                  "step is 9223372036854775807 but expected an integer in [0, 9007199254740992]");
}

TEST_F(CheckpointValidation, FieldsMustBeThereAndNothingElse) {
  nlohmann::json state = state_;
  state.erase("shuffle_state");
  EXPECT_CONTAINS(resume_error(with_state(state)), "the field \"shuffle_state\" is missing");
  state = state_;
  state["extra"] = 1;
  EXPECT_CONTAINS(resume_error(with_state(state)), "the metadata has an unexpected field \"extra\"");
  state = state_;
  state["version"] = 1;
  EXPECT_CONTAINS(resume_error(with_state(state)), "written by an older tandem");
  state = state_;
  state["setup"]["lr"] = 0.01;
  EXPECT_CONTAINS(resume_error(with_state(state)), "setup fact \"lr\" is not a string");
  EXPECT_CONTAINS(resume_error(with_metadata("[1, 2]")), "the metadata is a JSON array but expected an object");
  EXPECT_CONTAINS(resume_error(with_metadata("{\"epoch\": 1")), "invalid JSON");
}

TEST_F(CheckpointValidation, GeneratorDeviceStreamsAreRestored) {
  EXPECT_EQ(state_["generator"]["device_counters"], nlohmann::json::object());  // the seed net draws nothing
  nlohmann::json state = state_;
  state["generator"]["device_counters"] = {{"cpu:1", 5}, {"cuda:3", UINT64_MAX}};
  const std::map<Device, uint64_t> counters = {{Device::cpu(1), 5}, {Device::cuda(3), UINT64_MAX}};
  EXPECT_EQ(load_checkpoint(with_state(state)).generator.device_counters, counters);
  Trainer resumed = seed_net();
  resumed.load_checkpoint(edited_);
  EXPECT_EQ(generator_state().device_counters, counters);
}

TEST_F(CheckpointValidation, GeneratorDeviceStreamsMustBeValid) {
  const std::string long_key(1000, 'x');
  for (const std::string& key :
       {std::string("gpu:0"), std::string("cpu"), std::string("cpu:01"), std::string(" cpu:1"), std::string("CPU:1"),
        std::string("cpu:64"), std::string("cuda:-1"), std::string("cuda:99999999999"), long_key}) {
    SCOPED_TRACE(key);
    nlohmann::json state = state_;
    state["generator"]["device_counters"] = {{key, 1}};
    const std::string message = resume_error(with_state(state));
    EXPECT_CONTAINS(message, "device_counters has the key \"" + excerpt(key) +
                                 "\" but expected a device such as \"cpu:1\" or \"cuda:0\"");
    EXPECT_LT(message.size(), 400u);
  }
  for (const char* bad : {"-1", "1.5", "\"3\"", "null", "18446744073709551616"}) {
    SCOPED_TRACE(bad);
    nlohmann::json state = state_;
    state["generator"]["device_counters"] = {{"cpu:1", 0}};
    std::string text = state.dump();
    const std::string entry = "\"cpu:1\":0";
    text.replace(text.find(entry), entry.size(), "\"cpu:1\":" + std::string(bad));
    const std::string message = resume_error(with_metadata(text));
    EXPECT_CONTAINS(message, "device_counters[\"cpu:1\"] is ");
    EXPECT_CONTAINS(message, " but expected an integer in [0, 18446744073709551615]");
  }
  nlohmann::json state = state_;
  state["generator"]["device_counters"] = {1, 2};
  EXPECT_CONTAINS(resume_error(with_state(state)),
                  "device_counters is a JSON array but expected an object of at most 1000 counters by device");
  state = state_;
  for (int i = 0; i <= 1000; ++i) state["generator"]["device_counters"]["cuda:" + std::to_string(i)] = 1;
  EXPECT_CONTAINS(resume_error(with_state(state)), "device_counters is a JSON object of 1001 entries but expected");
  state = state_;
  state["generator"].erase("device_counters");
  EXPECT_CONTAINS(resume_error(with_state(state)), "the field \"device_counters\" is missing");
  state = state_;
  state["generator"]["streams"] = nlohmann::json::object();
  EXPECT_CONTAINS(resume_error(with_state(state)), "generator has an unexpected field \"streams\"");
  state = state_;
  state["version"] = 2;  // before the device streams
  EXPECT_CONTAINS(resume_error(with_state(state)), "written by an older tandem");
}

TEST_F(CheckpointValidation, HostileJsonIsRefusedBeforeItIsBuilt) {
  // 100000 nested arrays would overflow the stack when the parsed value is released.
  const std::string deep = "{\"format\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_CONTAINS(resume_error(with_metadata(deep)), "the JSON nests arrays and objects more than 64 levels deep");
  std::string twice = state_.dump();
  twice.insert(1, "\"epoch\":0,");
  EXPECT_CONTAINS(resume_error(with_metadata(twice)), "the JSON repeats the key \"epoch\" in one object");
  // A parser that stopped at the NUL would read the metadata before it and ignore the rest.
  EXPECT_CONTAINS(resume_error(with_metadata(state_.dump() + std::string("\0{}", 3))), "the JSON holds a NUL byte");
}

TEST_F(CheckpointValidation, NonFiniteWeightsAreBlamedOnTheFile) {
  TensorFile edited = file_;
  for (auto& [name, tensor] : edited.tensors) {
    if (name == "model.1.weight") {
      std::vector<float> values = tensor.to_vector();
      values[7] = std::nanf("");
      tensor = Tensor::from_vector(values, tensor.shape());
    }
  }
  save_tensors(edited.tensors, edited_, edited.metadata);
  const std::string message = resume_error(edited_);
  EXPECT_CONTAINS(message, "' is damaged: its data's checksum is ");
  EXPECT_CONTAINS(message, " when it was written (changed, or cut short, since)");
  EXPECT_EQ(message.find("learning rate"), std::string::npos) << message;
  // A version 4 file has no checksum: non-finite values are what tells damage there.
  nlohmann::json state = state_;
  state["version"] = 4;
  state.erase("checksum");
  edited.metadata["tandem.trainer"] = state.dump();
  save_tensors(edited.tensors, edited_, edited.metadata);
  EXPECT_CONTAINS(resume_error(edited_), "holds nan at element 7 of parameter 1.weight; the checkpoint is corrupt");
}

// Version 5 files (checksums over the tensors in name order) still resume, each version verified by its own checksum.
TEST_F(CheckpointValidation, Version5FilesAreVerifiedByTheirOwnChecksum) {
  Trainer reference = seed_net();
  reference.load_checkpoint(good_);
  const std::string version5 = checkpoint_checksum(file_, 5);
  ASSERT_NE(version5, checkpoint_checksum(file_));
  EXPECT_EQ(checkpoint_checksum(file_), state_["checksum"]);
  nlohmann::json state = state_;
  state["version"] = 5;
  state["checksum"] = version5;
  Trainer resumed = seed_net();
  resumed.load_checkpoint(with_state(state));
  EXPECT_EQ(parameter_values(resumed), parameter_values(reference));
  EXPECT_EQ(resumed.epoch(), reference.epoch());
  EXPECT_EQ(load_checkpoint(edited_).version, 5);
  state["checksum"] = state_["checksum"];  // version 6's checksum of the same data
  EXPECT_CONTAINS(resume_error(with_state(state)), "' is damaged: its data's checksum is " + version5);
  state = state_;
  state["checksum"] = version5;
  EXPECT_CONTAINS(resume_error(with_state(state)), "' is damaged");
  EXPECT_ERROR(checkpoint_checksum(file_, 4), "checkpoint_checksum: version 4 but checkpoints have checksums of "
                                              "versions 5 to 6");
}

// Note [Checkpoint checksums]: values are not taken for damage. A model whose buffer holds -inf on purpose (a mask)
// and NaN (a statistic not computed yet) resumes from the checkpoint tandem wrote, with those values.
TEST_F(CheckpointValidation, ACheckpointTandemWroteAlwaysLoadsWhateverItsValues) {
  struct Masked : nn::Cloneable<Masked> {
    Masked() {
      register_module("fc", fc);
      register_buffer("mask", mask);
    }
    Tensor forward(const Tensor& x) override { return fc->forward(x); }
    std::shared_ptr<nn::Linear> fc = std::make_shared<nn::Linear>(10, 1);
    Tensor mask = Tensor::from_vector({-INFINITY, 0.0f, NAN}, {3});
  };
  const std::string path = testing::scratch_path("masked.safetensors");
  manual_seed(0);
  Trainer trainer(std::make_shared<Masked>(), seed_options(1));
  trainer.fit(diabetes().train);
  trainer.save_checkpoint(path);
  manual_seed(0);
  Trainer resumed(std::make_shared<Masked>(), seed_options(1));
  resumed.load_checkpoint(path);
  const std::vector<float> mask = resumed.model()->named_buffers().at(0).second.to_vector();
  EXPECT_EQ(mask[0], -INFINITY);
  EXPECT_TRUE(std::isnan(mask[2]));
  EXPECT_EQ(resumed.epoch(), 1);
  std::remove(path.c_str());
}

// The optimizer state of a run follows its step count: Adam counts of other values, or a momentum buffer missing for
// one parameter, are not a checkpoint of this run.
TEST_F(CheckpointValidation, OptimizerStateThatDoesNotFollowTheStepsIsRefused) {
  TensorFile edited = file_;
  for (auto& [name, tensor] : edited.tensors) {
    if (name == "optimizer.1.momentum_buffer") name = "unused";
  }
  std::erase_if(edited.tensors, [](const auto& entry) { return entry.first == "unused"; });
  save_sealed(edited);
  EXPECT_CONTAINS(resume_error(edited_),
                  "holds a momentum buffer for 0.weight but none for 0.bias; every step "
                  "updates every trainable parameter");

  const std::string adam_path = testing::scratch_path("adam_steps.safetensors");
  TrainerOptions adam = seed_options();
  adam.optimizer =
      CustomOptimizer{"adamw", [](std::vector<Tensor> parameters) {
                        return std::make_unique<optim::AdamW>(std::move(parameters), optim::AdamWOptions{.lr = 0.01});
                      }};
  Trainer adam_run = seed_net(adam);
  adam_run.fit(diabetes().train);
  adam_run.save_checkpoint(adam_path);
  TensorFile adam_file = load_tensors(adam_path);
  nlohmann::json optimizer = nlohmann::json::parse(adam_file.metadata.at("tandem.optimizer"));
  optimizer["steps"] = {1, 2, 3, 4};
  adam_file.metadata["tandem.optimizer"] = optimizer.dump();
  save_sealed(adam_file);
  EXPECT_CONTAINS(resume_error(edited_, adam),
                  "holds optim::AdamW state whose parameter 0.weight has taken 1 steps, "
                  "but the trainer " +
                      std::to_string(adam_run.step()));
  std::remove(adam_path.c_str());
}

TEST_F(CheckpointValidation, LoadingIsAllOrNothing) {
  // Valid parameters first, then a momentum buffer of the wrong shape: nothing may be applied.
  TensorFile edited = file_;
  for (auto& [name, tensor] : edited.tensors) {
    if (name == "optimizer.3.momentum_buffer") tensor = Tensor::zeros({2});
  }
  save_sealed(edited);
  EXPECT_CONTAINS(resume_error(edited_),
                  "holds an optimizer state that does not fit the optimizer: optim::SGD::"
                  "load_state_dict: momentum_buffer of parameter 3 has shape [2] but the "
                  "parameter has shape [1]");

  edited = file_;
  edited.tensors.emplace_back("model.2.weight", Tensor::zeros({1}));
  save_sealed(edited);
  EXPECT_CONTAINS(resume_error(edited_), "has a model tensor for 2.weight which the model does not have");

  edited = file_;
  edited.tensors.erase(edited.tensors.begin() + 1);
  save_sealed(edited);
  EXPECT_CONTAINS(resume_error(edited_), "has no parameter 0.bias");
}

// The same checks for a version 3 file, whose optimizer state is one momentum buffer per parameter name.
TEST_F(CheckpointValidation, Version3MomentumBuffersAreCheckedAllOrNothing) {
  TensorFile version3 = file_;
  const optim::OptimizerState state = optim::read_optimizer_state(version3, good_);
  const std::vector<std::string> names = {"0.weight", "0.bias", "1.weight", "1.bias"};
  for (size_t i = 0; i < names.size(); ++i) {
    version3.tensors.emplace_back("momentum." + names[i], state.parameters[i].tensors.at(0).second);
  }
  nlohmann::json metadata = state_;
  metadata["version"] = 3;
  metadata.erase("checksum");
  version3.metadata["tandem.trainer"] = metadata.dump();

  TensorFile edited = version3;
  for (auto& [name, tensor] : edited.tensors) {
    if (name == "momentum.1.bias") tensor = Tensor::zeros({2});
  }
  save_tensors(edited.tensors, edited_, edited.metadata);
  EXPECT_CONTAINS(resume_error(edited_), "momentum buffer 1.bias has shape [2] in '");

  edited = version3;
  edited.tensors.emplace_back("momentum.2.weight", Tensor::zeros({1}));
  save_tensors(edited.tensors, edited_, edited.metadata);
  EXPECT_CONTAINS(resume_error(edited_), "has a momentum buffer for 2.weight which the model does not have");

  edited = version3;
  edited.tensors.emplace_back("optimizer.0.momentum_buffer", Tensor::zeros({20, 10}));
  save_tensors(edited.tensors, edited_, edited.metadata);
  EXPECT_CONTAINS(resume_error(edited_),
                  "has an unexpected tensor \"optimizer.0.momentum_buffer\" for a version 3 checkpoint");

  save_tensors(version3.tensors, edited_, version3.metadata);
  Trainer resumed = seed_net();
  resumed.load_checkpoint(edited_);
  EXPECT_EQ(resumed.epoch(), 2);
}

TEST_F(CheckpointValidation, CorruptOptimizerStateIsRefused) {
  TensorFile edited = file_;
  for (auto& [name, tensor] : edited.tensors) {
    if (name == "optimizer.2.momentum_buffer") {
      std::vector<float> values = tensor.to_vector();
      values[3] = INFINITY;
      tensor = Tensor::from_vector(values, tensor.shape());
    }
  }
  save_tensors(edited.tensors, edited_, edited.metadata);
  EXPECT_CONTAINS(resume_error(edited_), "' is damaged: its data's checksum is ");
  nlohmann::json version4 = state_;
  version4["version"] = 4;
  version4.erase("checksum");
  edited.metadata["tandem.trainer"] = version4.dump();
  save_tensors(edited.tensors, edited_, edited.metadata);
  EXPECT_CONTAINS(resume_error(edited_),
                  "holds inf at element 3 of optimizer state momentum_buffer of parameter 1.weight; the checkpoint is "
                  "corrupt");

  edited = file_;
  edited.metadata.erase("tandem.optimizer");
  save_sealed(edited);
  EXPECT_CONTAINS(resume_error(edited_), "holds no optimizer state (no \"tandem.optimizer\" metadata)");

  nlohmann::json optimizer = nlohmann::json::parse(file_.metadata.at("tandem.optimizer"));
  edited = file_;
  optimizer["kind"] = "optim::Adam";
  edited.metadata["tandem.optimizer"] = optimizer.dump();
  save_sealed(edited);
  EXPECT_CONTAINS(resume_error(edited_), "got the state of \"optim::Adam\" version 1 but expected \"optim::SGD\"");

  optimizer = nlohmann::json::parse(file_.metadata.at("tandem.optimizer"));
  optimizer["steps"].erase(3);
  edited = file_;
  edited.metadata["tandem.optimizer"] = optimizer.dump();
  save_sealed(edited);
  EXPECT_CONTAINS(resume_error(edited_), "the tensor \"optimizer.3.momentum_buffer\" is not named optimizer.");

  optimizer = nlohmann::json::parse(file_.metadata.at("tandem.optimizer"));
  optimizer["steps"] = {1, 2, 3, 4, 5};
  edited = file_;
  edited.metadata["tandem.optimizer"] = optimizer.dump();
  save_sealed(edited);
  EXPECT_CONTAINS(resume_error(edited_), "got the state of 5 parameters for 4");

  optimizer = nlohmann::json::parse(file_.metadata.at("tandem.optimizer"));
  optimizer["steps"][0] = -1;
  edited = file_;
  edited.metadata["tandem.optimizer"] = optimizer.dump();
  save_sealed(edited);
  EXPECT_CONTAINS(resume_error(edited_), "steps[0] is -1 but expected an integer in [0, ");

  edited = file_;
  edited.tensors.emplace_back("momentum.0.weight", Tensor::zeros({20, 10}));
  save_sealed(edited);
  EXPECT_CONTAINS(resume_error(edited_), "has an unexpected tensor \"momentum.0.weight\" for a version 6 checkpoint");

  edited = file_;
  for (auto& [name, tensor] : edited.tensors) {
    if (name == "optimizer.0.momentum_buffer") name = "optimizer.0.exp_avg";
  }
  save_sealed(edited);
  EXPECT_CONTAINS(resume_error(edited_), "has the slot \"exp_avg\" but expected at most one \"momentum_buffer\"");

  nlohmann::json state = state_;
  state["version"] = 7;
  EXPECT_CONTAINS(resume_error(with_state(state)),
                  "version 7 but expected \"tandem-trainer-checkpoint\" version 3 to 6");
}

TEST_F(CheckpointValidation, AnotherSetupIsRefusedWithTheDifferences) {
  TrainerOptions options = seed_options();
  options.sgd.lr = 0.02;
  options.batch_size = 32;
  options.shuffle_seed = 5;
  const std::string message = resume_error(good_, options);
  EXPECT_CONTAINS(message,
                  "belongs to another setup: batch_size: 64 in the checkpoint, 32 now; lr: 0.01 in the "
                  "checkpoint, 0.02 now; shuffle_seed: 0 in the checkpoint, 5 now");

  options = seed_options(/*epochs=*/5);
  EXPECT_CONTAINS(resume_error(good_, options), "epochs: 2 in the checkpoint, 5 now");
  options.setup = {{"activation", "tanh"}};
  EXPECT_CONTAINS(resume_error(good_, options), "activation: (none) in the checkpoint, tanh now");

  // lr and epochs may change when the caller says so; then training continues from epoch 2.
  options = seed_options(/*epochs=*/3);
  options.sgd.lr = 0.02;
  options.resume_may_change = {"lr", "epochs"};
  Trainer resumed = seed_net(options);
  resumed.load_checkpoint(good_);
  EXPECT_EQ(resumed.epoch(), 2);
  EXPECT_EQ(resumed.fit(diabetes().train).epochs, 3);

  options.resume_may_change = {"batch_size"};
  EXPECT_ERROR(seed_net(options), "resume_may_change holds \"batch_size\" but only \"lr\" and \"epochs\" may change");
  options.resume_may_change = {};
  options.setup = {{"lr", "1"}};
  EXPECT_ERROR(seed_net(options), "options.setup must not set \"lr\", which the Trainer records itself");
}

TEST_F(CheckpointValidation, OtherTrainingDataIsRefusedAtFit) {
  TrainerOptions options = seed_options(/*epochs=*/3);
  options.resume_may_change = {"epochs"};
  Trainer resumed = seed_net(options);
  resumed.load_checkpoint(good_);
  const TableDataset fewer_rows = diabetes().train.slice(0, 100);
  EXPECT_ERROR(resumed.fit(fewer_rows), "Trainer::fit: the training data differs from the data of the checkpoint");
  EXPECT_ERROR(resumed.fit(fewer_rows), "354 rows x 10 features, target target, fnv1a64 ");
  EXPECT_EQ(resumed.epoch(), 2);
  EXPECT_EQ(resumed.fit(diabetes().train).epochs, 3);
}

}  // namespace
}  // namespace tandem::trainers

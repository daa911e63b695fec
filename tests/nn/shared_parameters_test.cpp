// Shared parameters (weight tying, Note [Shared parameters] in nn/module.h): one tensor in two member slots is one
// parameter for the registry, autograd, optimizers, copies, moves and save/load, as in PyTorch.
#include "safetensors_test_helpers.h"
#include "support/tied_net.h"

namespace tandem {
namespace {

using testing::expect_close;
using testing::make_tied_net;
using testing::ScratchDir;
using testing::TiedNet;
using testing::untied_copy;

constexpr int64_t kVocab = 7;
constexpr int64_t kEmbd = 4;

// nanoGPT's tie and names: lm_head.weight is transformer.wte.weight (`self.transformer.wte.weight =
// self.lm_head.weight`), logits = lm_head(ln_f(wte(idx))).
class Body : public nn::Cloneable<Body> {
 public:
  Body() {
    register_module("wte", wte);
    register_module("ln_f", ln_f);
  }
  std::shared_ptr<nn::Embedding> wte = std::make_shared<nn::Embedding>(kVocab, kEmbd);
  std::shared_ptr<nn::LayerNorm> ln_f = std::make_shared<nn::LayerNorm>(Shape{kEmbd});
};

class TinyGpt : public nn::Cloneable<TinyGpt> {
 public:
  TinyGpt() {
    register_module("transformer", transformer);
    register_module("lm_head", lm_head);
    lm_head->weight = transformer->wte->weight;
  }
  Tensor forward(const Tensor& idx) override {
    return lm_head->forward(transformer->ln_f->forward(transformer->wte->forward(idx)));
  }
  std::shared_ptr<Body> transformer = std::make_shared<Body>();
  std::shared_ptr<nn::Linear> lm_head = std::make_shared<nn::Linear>(kEmbd, kVocab, /*bias=*/false);
};

const std::vector<std::string> kGptParameters = {"transformer.wte.weight", "transformer.ln_f.weight",
                                                 "transformer.ln_f.bias"};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : named) names.push_back(name);
  return names;
}

bool tied(const TinyGpt& gpt) { return gpt.lm_head->weight.is_same(gpt.transformer->wte->weight); }

TEST(SharedParameters, TheRegistryListsATiedTensorOnceUnderItsFirstName) {
  TinyGpt gpt;
  const std::vector<Tensor> parameters = gpt.parameters();
  ASSERT_EQ(parameters.size(), 3u);
  EXPECT_TRUE(parameters[0].is_same(gpt.lm_head->weight));
  EXPECT_TRUE(parameters[0].is_same(gpt.transformer->wte->weight));
  EXPECT_EQ(names_of(gpt.named_parameters()), kGptParameters);
  EXPECT_EQ(gpt.num_parameters(), kVocab * kEmbd + 2 * kEmbd);  // PyTorch's sum(p.numel() for p in parameters())
  // state_dict() keeps every name, as PyTorch's; state_tensors() groups them by tensor.
  EXPECT_EQ(names_of(gpt.state_dict()), (std::vector<std::string>{"transformer.wte.weight", "transformer.ln_f.weight",
                                                                  "transformer.ln_f.bias", "lm_head.weight"}));
  const std::vector<nn::Module::StateTensor> state = gpt.state_tensors();
  ASSERT_EQ(state.size(), 3u);
  EXPECT_EQ(state[0].names, (std::vector<std::string>{"transformer.wte.weight", "lm_head.weight"}));
  EXPECT_TRUE(state[0].tensor.is_same(gpt.lm_head->weight));
  EXPECT_EQ(state[1].names, std::vector<std::string>{"transformer.ln_f.weight"});
  // An optimizer over parameters() takes it (it refuses one tensor listed twice).
  optim::SGD sgd(gpt.parameters(), {.lr = 0.1});
  EXPECT_EQ(sgd.parameters().size(), 3u);
  // Freezing through either name freezes the one tensor.
  gpt.lm_head->weight.set_requires_grad(false);
  EXPECT_FALSE(gpt.transformer->wte->weight.requires_grad());
}

// Both uses' gradients meet in the one leaf: the tied gradient is the sum of an untied twin's two gradients.
TEST(SharedParameters, TheGradientOfATiedWeightSumsBothUses) {
  auto net = make_tied_net(Device::cpu(0), 3, 4);
  auto twin = untied_copy(*net);
  manual_seed(9);
  const Tensor x = Tensor::randn({5, 4});
  const Tensor y = Tensor::randn({5, 1});
  nn::mse_loss(net->forward(x), y).backward();
  nn::mse_loss(twin->forward(x), y).backward();
  const Tensor both = twin->encoder->weight.grad() + twin->decoder->weight.grad();
  expect_close(net->encoder->weight.grad(), both, 1e-6, 1e-7);
  EXPECT_TRUE(net->decoder->weight.grad().is_same(net->encoder->weight.grad()));
  expect_close(net->head->weight.grad(), twin->head->weight.grad(), 1e-6, 1e-7);
  // zero_grad clears the one gradient.
  net->zero_grad();
  EXPECT_FALSE(net->decoder->weight.grad().defined());
}

// An optimizer step on the tied net equals the step on one weight used twice, written out with plain leaves.
template <class Optimizer, class Options>
void expect_steps_equal_one_weight_used_twice(const Options& options) {
  auto net = make_tied_net(Device::cpu(0), 4, 4);
  std::vector<Tensor> leaves;
  for (const Tensor& parameter : net->parameters()) leaves.push_back(parameter.detach().clone().set_requires_grad());
  ASSERT_EQ(leaves.size(), 5u);  // weight, encoder.bias, decoder.bias, head.weight, head.bias
  const Tensor& weight = leaves[0];
  Optimizer tied(net->parameters(), options);
  Optimizer reference(leaves, options);
  for (uint64_t step = 0; step < 4; ++step) {
    manual_seed(20 + step);
    const Tensor x = Tensor::randn({6, 4});
    const Tensor y = Tensor::randn({6, 1});
    tied.zero_grad();
    nn::mse_loss(net->forward(x), y).backward();
    tied.step();
    reference.zero_grad();
    const Tensor hidden = tanh(linear(tanh(linear(x, weight, leaves[1])), weight, leaves[2]));
    nn::mse_loss(linear(hidden, leaves[3], leaves[4]), y).backward();
    reference.step();
  }
  const std::vector<Tensor> trained = net->parameters();
  for (size_t i = 0; i < leaves.size(); ++i) expect_close(trained[i], leaves[i], 1e-6, 1e-7);
  EXPECT_TRUE(net->decoder->weight.is_same(trained[0]));
}

TEST(SharedParameters, SgdWithMomentumStepsATiedWeightAsOneWeightUsedTwice) {
  expect_steps_equal_one_weight_used_twice<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}

TEST(SharedParameters, AdamWStepsATiedWeightAsOneWeightUsedTwice) {
  expect_steps_equal_one_weight_used_twice<optim::AdamW>(optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
}

// clone() copies the shared tensor once: writing into one slot's data shows in the other.
TEST(SharedParameters, CloneKeepsTheTie) {
  TinyGpt gpt;
  for (const std::optional<Device> device : {std::optional<Device>(), std::optional<Device>(Device::cpu(1))}) {
    auto copy = std::static_pointer_cast<TinyGpt>(gpt.clone(device));
    ASSERT_TRUE(tied(*copy));
    EXPECT_FALSE(copy->lm_head->weight.is_same(gpt.lm_head->weight));
    EXPECT_EQ(copy->lm_head->weight.device(), device.value_or(Device::cpu(0)));
    EXPECT_EQ(copy->parameters().size(), 3u);
    {
      NoGradGuard no_grad;
      copy->lm_head->weight.fill_(0.25f);
    }
    expect_close(copy->transformer->wte->weight, Tensor::full({kVocab, kEmbd}, 0.25f, copy->device()), 0, 0);
    EXPECT_NE(gpt.transformer->wte->weight.to_vector(), copy->transformer->wte->weight.to_vector());
  }
}

// set_parameters and clone_with_parameters take parameters() order: the one tensor given goes into both slots.
TEST(SharedParameters, SetParametersPutsTheGivenTensorInEverySlot) {
  TinyGpt gpt;
  std::vector<Tensor> given;
  for (const Tensor& parameter : gpt.parameters()) given.push_back(parameter.detach().clone());
  auto copy = std::static_pointer_cast<TinyGpt>(gpt.clone_with_parameters(given));
  EXPECT_TRUE(copy->lm_head->weight.is_same(given[0]));
  EXPECT_TRUE(copy->transformer->wte->weight.is_same(given[0]));
  EXPECT_TRUE(copy->transformer->ln_f->bias.is_same(given[2]));
  EXPECT_ERROR(gpt.set_parameters(std::vector<Tensor>(4, given[0])),
               "nn::Module::set_parameters: TinyGpt has 3 parameters but 4 tensors were given");
}

// to() moves the shared tensor once and keeps its identity (and the gradient along).
TEST(SharedParameters, ToMovesATiedTensorOnce) {
  TinyGpt gpt;
  const Tensor weight = gpt.lm_head->weight;
  weight.set_grad(Tensor::ones({kVocab, kEmbd}));
  const std::vector<float> values = weight.to_vector();
  gpt.to(Device::cpu(1));
  EXPECT_TRUE(tied(gpt));
  EXPECT_TRUE(gpt.transformer->wte->weight.is_same(weight));
  EXPECT_EQ(weight.device(), Device::cpu(1));
  EXPECT_EQ(weight.to_vector(), values);
  EXPECT_EQ(weight.grad().device(), Device::cpu(1));
  EXPECT_EQ(weight.grad().to_vector(), std::vector<float>(kVocab * kEmbd, 1.0f));
}

// A submodule registered in two places is shared too: listed once, and clone() copies it once.
TEST(SharedParameters, ASharedSubmoduleIsCopiedOnce) {
  auto fc = std::make_shared<nn::Linear>(3, 3);
  nn::Sequential twice{fc, std::make_shared<nn::Tanh>(), fc};
  EXPECT_EQ(names_of(twice.named_parameters()), (std::vector<std::string>{"0.weight", "0.bias"}));
  EXPECT_EQ(twice.state_dict().size(), 4u);
  auto copy = std::static_pointer_cast<nn::Sequential>(twice.clone());
  EXPECT_EQ((*copy)[0], (*copy)[2]);
  EXPECT_NE((*copy)[0], fc);
  const Tensor x = Tensor::randn({2, 3});
  expect_close(copy->forward(x), twice.forward(x), 0, 0);
}

// One tensor cannot be trained under one name and not under another.
class ParameterAndBuffer : public nn::Cloneable<ParameterAndBuffer> {
 public:
  ParameterAndBuffer() {
    register_parameter("weight", weight);
    register_buffer("stats", stats);
    stats = weight;
  }
  Tensor weight = Tensor::ones({2});
  Tensor stats = Tensor::zeros({2});
};

TEST(SharedParameters, ATensorThatIsAParameterAndABufferIsAnError) {
  ParameterAndBuffer module;
  EXPECT_ERROR(module.state_tensors(),
               "nn::Module::state_tensors: 'weight' is a parameter of ParameterAndBuffer and 'stats' a buffer, but "
               "they are one tensor");
  EXPECT_ERROR(module.clone(), "nn::Module::clone: 'weight' is a parameter");
  ScratchDir dir;
  EXPECT_ERROR(save(module, dir.file("mixed.safetensors")), "'stats' a buffer, but they are one tensor");
}

// ---- save and load ----

// Fills every parameter of `gpt` with distinct values (seeded), so that a load shows where each value came from.
void randomize(TinyGpt& gpt, uint64_t seed) {
  manual_seed(seed);
  NoGradGuard no_grad;
  for (const Tensor& parameter : gpt.parameters()) Tensor(parameter).copy_(Tensor::randn(parameter.shape()));
}

std::vector<std::string> file_names(const std::string& path) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : load_tensors(path).tensors) names.push_back(name);
  return names;
}

void expect_same_values(const TinyGpt& actual, const TinyGpt& expected) {
  const auto a = actual.state_dict();
  const auto b = expected.state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) expect_close(a[i].second, b[i].second, 0, 0);
}

TEST(SharedParameters, SaveWritesATiedTensorOnceAndLoadRestoresBothNames) {
  ScratchDir dir;
  const std::string path = dir.file("gpt.safetensors");
  TinyGpt saved;
  randomize(saved, 1);
  save(saved, path);
  EXPECT_EQ(file_names(path), kGptParameters);

  TinyGpt loaded;
  randomize(loaded, 2);
  const Tensor weight = loaded.lm_head->weight;
  load(loaded, path);
  EXPECT_TRUE(tied(loaded));
  EXPECT_TRUE(loaded.lm_head->weight.is_same(weight));  // in place
  expect_same_values(loaded, saved);
  const Tensor idx = Tensor::from_vector(std::vector<int64_t>{0, 3, 6, 2}, {2, 2});
  expect_close(loaded.forward(idx), saved.forward(idx), 0, 0);
}

// safetensors.torch.save_model keeps one name of a shared tensor (for nanoGPT the sorted first, lm_head.weight).
TEST(SharedParameters, LoadTakesATiedTensorFromAnyOneOfItsNames) {
  ScratchDir dir;
  const std::string path = dir.file("save_model.safetensors");
  TinyGpt source;
  randomize(source, 3);
  save_tensors({{"lm_head.weight", source.lm_head->weight},
                {"transformer.ln_f.bias", source.transformer->ln_f->bias},
                {"transformer.ln_f.weight", source.transformer->ln_f->weight}},
               path, {{"format", "pt"}, {"transformer.wte.weight", "lm_head.weight"}});
  TinyGpt loaded;
  load(loaded, path);
  EXPECT_TRUE(tied(loaded));
  expect_same_values(loaded, source);
}

// save_file over a state_dict deduplicated by hand may keep both names: equal values load.
TEST(SharedParameters, LoadTakesATiedTensorUnderBothNamesWhenTheyAreEqual) {
  ScratchDir dir;
  const std::string path = dir.file("both.safetensors");
  TinyGpt source;
  randomize(source, 4);
  save_tensors(source.state_dict(), path);  // a copy under each name
  EXPECT_EQ(file_names(path).size(), 4u);
  TinyGpt loaded;
  load(loaded, path);
  EXPECT_TRUE(tied(loaded));
  expect_same_values(loaded, source);
}

TEST(SharedParameters, LoadRefusesATiedTensorWhoseNamesDifferOrAreMissing) {
  ScratchDir dir;
  TinyGpt source;
  randomize(source, 5);
  TinyGpt target;
  randomize(target, 6);
  const std::vector<float> before = target.lm_head->weight.to_vector();

  const std::string differing = dir.file("differing.safetensors");
  std::vector<std::pair<std::string, Tensor>> state = source.state_dict();
  state.back().second = source.lm_head->weight.detach() * 2.0f;
  save_tensors(state, differing);
  EXPECT_ERROR(load(target, differing),
               "load: 'transformer.wte.weight' and 'lm_head.weight' are one tensor of TinyGpt but hold different "
               "values in the file");

  const std::string missing = dir.file("missing.safetensors");
  save_tensors({{"transformer.ln_f.weight", source.transformer->ln_f->weight},
                {"transformer.ln_f.bias", source.transformer->ln_f->bias}},
               missing);
  EXPECT_ERROR(load(target, missing),
               "load: checkpoint has no tensor under any of the names 'transformer.wte.weight', 'lm_head.weight' of "
               "one shared tensor");
  EXPECT_EQ(target.lm_head->weight.to_vector(), before);  // nothing written
}

}  // namespace
}  // namespace tandem

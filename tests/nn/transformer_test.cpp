// nn::TransformerEncoderLayer and nn::TransformerEncoder: PyTorch's names, the post-norm and pre-norm computations
// against their formulas written with the layer's own submodules, masks, deep copies per layer, and errors.
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_close;

class TransformerTest : public testing::EveryDevice {
 protected:
  void SetUp() override {
    EveryDevice::SetUp();
    manual_seed(23);
  }
};

std::vector<std::string> names_of(const nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& [name, parameter] : module.named_parameters()) names.push_back(name);
  return names;
}

// The layer's formula (eval mode: no dropout), from its submodules.
Tensor formula(nn::TransformerEncoderLayer& layer, const Tensor& x, bool norm_first, bool gelu_activation,
               const nn::AttentionMasks& masks = {}) {
  const auto attend = [&](const Tensor& y) { return layer.self_attn->forward(y, y, y, masks); };
  const auto feed = [&](const Tensor& y) {
    const Tensor hidden = layer.linear1->forward(y);
    return layer.linear2->forward(gelu_activation ? gelu(hidden) : relu(hidden));
  };
  if (norm_first) {
    const Tensor h = x + attend(layer.norm1->forward(x));
    return h + feed(layer.norm2->forward(h));
  }
  const Tensor h = layer.norm1->forward(x + attend(x));
  return layer.norm2->forward(h + feed(h));
}

TEST_P(TransformerTest, LayerHasPyTorchsNamesAndFollowsItsFormulaPostAndPreNorm) {
  for (const bool norm_first : {false, true}) {
    for (const std::string activation : {"relu", "gelu"}) {
      nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .activation = activation,
                                               .norm_first = norm_first});
      layer.to(device());
      layer.eval();
      EXPECT_EQ(names_of(layer), (std::vector<std::string>{
                                     "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                                     "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                                     "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}));
      EXPECT_EQ(layer.linear1->weight.shape(), (Shape{16, 8}));
      const Tensor x = Tensor::randn({2, 5, 8}, device());
      expect_close(layer.forward(x), formula(layer, x, norm_first, activation == "gelu"));
      const Tensor padding = Tensor::from_vector(std::vector<int64_t>{0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, {2, 5}, device());
      expect_close(layer.forward(x, {.key_padding_mask = padding, .is_causal = true}),
                   formula(layer, x, norm_first, activation == "gelu", {.key_padding_mask = padding, .is_causal = true}));
    }
  }
}

TEST_P(TransformerTest, SequenceFirstLayersTransposeAroundTheSameComputation) {
  nn::TransformerEncoderLayer batch_first(8, 2, {.dim_feedforward = 12});
  nn::TransformerEncoderLayer sequence_first(8, 2, {.dim_feedforward = 12, .batch_first = false});
  sequence_first.set_parameters(batch_first.parameters());
  batch_first.to(device());
  sequence_first.to(device());
  batch_first.eval();
  sequence_first.eval();
  const Tensor x = Tensor::randn({2, 3, 8}, device());
  expect_close(sequence_first.forward(x.transpose(0, 1)), batch_first.forward(x).transpose(0, 1));
}

TEST_P(TransformerTest, EncoderStacksIndependentCopiesThatStartAlike) {
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16});
  nn::TransformerEncoder encoder(layer, 3, std::make_shared<nn::LayerNorm>(Shape{8}));
  encoder.to(device());
  encoder.eval();
  const std::vector<std::string> names = names_of(encoder);
  ASSERT_EQ(names.size(), 3u * 12 + 2);
  EXPECT_EQ(names.front(), "layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(names[12], "layers.1.self_attn.in_proj_weight");
  EXPECT_EQ(names.back(), "norm.bias");
  const auto layer_at = [&](size_t i) { return std::static_pointer_cast<nn::TransformerEncoderLayer>((*encoder.layers)[i]); };
  expect_close(layer_at(2)->linear1->weight, layer.linear1->weight.to(device()), 0, 0);  // copies of the layer
  EXPECT_FALSE(layer_at(1)->linear1->weight.shares_storage_with(layer_at(2)->linear1->weight));

  const Tensor x = Tensor::randn({2, 4, 8}, device());
  Tensor expected = x;
  for (size_t i = 0; i < 3; ++i) expected = layer_at(i)->forward(expected);
  expect_close(encoder.forward(x), encoder.norm->forward(expected));
  sum(encoder.forward(x)).backward();
  for (const auto& [name, parameter] : encoder.named_parameters()) EXPECT_TRUE(parameter.grad().defined()) << name;
}

TEST_P(TransformerTest, DropoutActsOnlyWhileTraining) {
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.3});
  layer.to(device());
  const Tensor x = Tensor::randn({2, 4, 8}, device());
  const Tensor trained = layer.forward(x);
  layer.eval();
  expect_close(layer.forward(x), formula(layer, x, false, false));
  EXPECT_GT(max_abs_diff(trained, layer.forward(x)), 1e-3);
}

TEST_P(TransformerTest, BadArgumentsAreErrors) {
  EXPECT_ERROR(nn::TransformerEncoderLayer(8, 2, {.activation = "swish"}),
               "nn::TransformerEncoderLayer: activation is \"swish\" but expected \"relu\" or \"gelu\"");
  EXPECT_ERROR(nn::TransformerEncoderLayer(8, 2, {.dim_feedforward = 0}), "dim_feedforward is 0 but expected >= 1");
  EXPECT_ERROR(nn::TransformerEncoderLayer(8, 3), "embed_dim 8 is not divisible by num_heads 3");
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16});
  EXPECT_ERROR(nn::TransformerEncoder(layer, 0), "nn::TransformerEncoder: num_layers is 0 but expected >= 1");
  EXPECT_ERROR(layer.forward(Tensor::randn({4, 8})), "nn::TransformerEncoderLayer: src has shape [4, 8] but expected 3 dims");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(TransformerTest);

}  // namespace
}  // namespace tandem

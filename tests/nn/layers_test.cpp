// Embedding, GELU, Sigmoid, Softmax against float64 references and by gradcheck; Sequential built variadically.
#include <cmath>
#include <numbers>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::to_double;

class LayersTest : public testing::EveryDevice {};

TEST_P(LayersTest, EmbeddingLooksUpRowsOfInt64Indices) {
  manual_seed(31);
  nn::Embedding embedding(5, 3, device());
  EXPECT_EQ(embedding.weight.shape(), (Shape{5, 3}));
  const std::vector<double> weight = to_double(embedding.weight);
  const std::vector<int64_t> index_values = {4, 0, 2, 2, 1, 4};
  const Tensor indices = Tensor::from_vector(index_values, {2, 3}, device());
  std::vector<double> expected;
  for (int64_t i : index_values)
    for (int64_t j = 0; j < 3; ++j) expected.push_back(weight[i * 3 + j]);
  expect_values(embedding(indices), expected, {2, 3, 3});
  // Rows looked up twice get twice the gradient; rows never looked up get none.
  sum(embedding(indices)).backward();
  expect_values(embedding.weight.grad(), {1, 1, 1, 1, 1, 1, 2, 2, 2, 0, 0, 0, 2, 2, 2}, {5, 3});
  testing::gradcheck([&](const std::vector<Tensor>& in) { return embedding(indices) * embedding(indices); },
                     {embedding.weight});
}

TEST_P(LayersTest, EmbeddingErrors) {
  EXPECT_ERROR(nn::Embedding(0, 3), "nn::Embedding: num_embeddings is 0 but expected at least 1");
  EXPECT_ERROR(nn::Embedding(3, 0), "nn::Embedding: embedding_dim is 0 but expected at least 1");
  nn::Embedding embedding(4, 2, device());
  EXPECT_ERROR(embedding(Tensor::zeros({3}, device())),
               "nn::Embedding: the indices are float32 but expected int64");
  // index_select checks the range, at the position in the flattened indices.
  EXPECT_ERROR(embedding(Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 4}, {2, 2}, device())),
               "index_select: index 4 at position 3 is out of range for dimension 0 of size 4");
  EXPECT_ERROR(embedding(Tensor::from_vector(std::vector<int64_t>{-1}, {1}, device())),
               "index_select: index -1 at position 0 is out of range for dimension 0 of size 4");
  const Device elsewhere = device().is_cuda() ? Device::cpu(0) : Device::cpu(1);
  EXPECT_ERROR(embedding(Tensor::from_vector(std::vector<int64_t>{0}, {1}, elsewhere)),
               "nn::Embedding: the indices are on " + elsewhere.str() + " but the weight is on " + device().str());
}

TEST_P(LayersTest, ActivationLayersMatchFloat64References) {
  manual_seed(32);
  const Tensor x = Tensor::randn({3, 4}, device()) * 2.0f;
  const std::vector<double> xs = to_double(x);
  std::vector<double> sigmoid_ref, gelu_ref, gelu_tanh_ref;
  for (double v : xs) {
    sigmoid_ref.push_back(1.0 / (1.0 + std::exp(-v)));
    gelu_ref.push_back(0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2)));
    const double inner = std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v);
    gelu_tanh_ref.push_back(0.5 * v * (1.0 + std::tanh(inner)));
  }
  expect_values(nn::Sigmoid()(x), sigmoid_ref, {3, 4}, 1e-5, 1e-6);
  expect_values(nn::GELU()(x), gelu_ref, {3, 4}, 1e-5, 1e-6);
  expect_values(nn::GELU("tanh")(x), gelu_tanh_ref, {3, 4}, 1e-5, 1e-6);

  for (int64_t dim : {0, 1, -1}) {
    const int64_t d = dim < 0 ? dim + 2 : dim;
    std::vector<double> softmax_ref(xs.size());
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        double total = 0;
        for (int64_t k = 0; k < (d == 0 ? 3 : 4); ++k) total += std::exp(d == 0 ? xs[k * 4 + j] : xs[i * 4 + k]);
        softmax_ref[i * 4 + j] = std::exp(xs[i * 4 + j]) / total;
      }
    expect_values(nn::Softmax(dim)(x), softmax_ref, {3, 4}, 1e-5, 1e-6);
  }
}

TEST_P(LayersTest, ActivationLayersGradcheck) {
  manual_seed(33);
  const Tensor x = Tensor::randn({3, 4}, device()).set_requires_grad();
  for (std::shared_ptr<nn::Module> layer : std::vector<std::shared_ptr<nn::Module>>{
           std::make_shared<nn::Sigmoid>(), std::make_shared<nn::GELU>(), std::make_shared<nn::GELU>("tanh"),
           std::make_shared<nn::Softmax>(1), std::make_shared<nn::Softmax>(0)}) {
    SCOPED_TRACE(layer->name() + "(" + layer->extra_repr() + ")");
    testing::gradcheck([&](const std::vector<Tensor>& in) { return layer->forward(in[0]); }, {x});
  }
}

TEST_P(LayersTest, ActivationLayerErrors) {
  EXPECT_ERROR(nn::GELU("exact"), "nn::GELU: approximate is 'exact' but expected 'none' or 'tanh'");
  nn::Softmax softmax(2);
  EXPECT_ERROR(softmax(Tensor::zeros({2, 3}, device())),
               "nn::Softmax: dim 2 is out of range for an input of shape [2, 3]");
  EXPECT_ERROR(nn::Softmax(-3)(Tensor::zeros({2, 3}, device())), "nn::Softmax: dim -3 is out of range");
}

TEST_P(LayersTest, SequentialFromValuesAndSharedPointers) {
  manual_seed(34);
  auto head = std::make_shared<nn::Linear>(8, 1, true, device());
  nn::Sequential net(nn::Linear(4, 8, true, device()), nn::GELU(), nn::LayerNorm({8}, 1e-5, true, true, device()),
                     nn::Dropout(0.5), head);
  ASSERT_EQ(net.size(), 5u);
  EXPECT_EQ(net[4], head);  // a shared pointer is kept, not copied
  EXPECT_EQ(net[1]->name(), "GELU");
  std::vector<std::string> names;
  for (const auto& [name, parameter] : net.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}));
  net.eval();
  const Tensor x = Tensor::randn({3, 4}, device());
  const Tensor expected = (*head)((*net[2])(nn::GELU()((*net[0])(x))));
  testing::expect_close(net(x), expected);

  // A Sequential given alone is copied (the copy constructor), not nested; nesting takes a shared pointer.
  nn::Sequential copy(net);
  EXPECT_EQ(copy.size(), 5u);
  nn::Sequential nested(std::make_shared<nn::Sequential>(net), nn::ReLU());
  EXPECT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested.named_parameters().front().first, "0.0.weight");
  // The braced list of shared pointers still works.
  nn::Sequential braced{std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::Tanh>()};
  EXPECT_EQ(braced.size(), 2u);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(LayersTest);

}  // namespace
}  // namespace tandem

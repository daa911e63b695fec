// nn::ModuleList and nn::ModuleDict: PyTorch's names, forward through the owner, deep clones that iterate their own
// copies, state round trips, and the errors.
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_close;

class Stack : public nn::Cloneable<Stack> {
 public:
  Stack() {
    for (int i = 0; i < 3; ++i) layers->push_back(std::make_shared<nn::Linear>(4, 4));
    register_module("layers", layers);
    register_module("heads", heads);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = x;
    for (const auto& layer : *layers) y = relu(layer->forward(y));
    return (*heads)["value"]->forward(y);
  }

  std::shared_ptr<nn::ModuleList> layers = std::make_shared<nn::ModuleList>();
  std::shared_ptr<nn::ModuleDict> heads = std::make_shared<nn::ModuleDict>(
      nn::ModuleDict{{"value", std::make_shared<nn::Linear>(4, 1)}, {"policy", std::make_shared<nn::Linear>(4, 2)}});
};

TEST(Containers, NamesFollowPyTorchAndForwardRunsThroughTheOwner) {
  manual_seed(3);
  Stack net;
  std::vector<std::string> names;
  for (const auto& [name, parameter] : net.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                                             "layers.2.weight", "layers.2.bias", "heads.value.weight",
                                             "heads.value.bias", "heads.policy.weight", "heads.policy.bias"}));
  EXPECT_EQ(net.heads->keys(), (std::vector<std::string>{"value", "policy"}));
  EXPECT_TRUE(net.heads->contains("policy"));
  EXPECT_FALSE(net.heads->contains("critic"));
  EXPECT_EQ(net.layers->size(), 3u);

  const Tensor x = Tensor::randn({5, 4});
  Tensor expected = x;
  for (size_t i = 0; i < 3; ++i) {
    const auto& layer = static_cast<const nn::Linear&>(*(*net.layers)[i]);
    expected = relu(linear(expected, layer.weight, layer.bias));
  }
  const auto& value = static_cast<const nn::Linear&>(*(*net.heads)["value"]);
  expect_close(net.forward(x), linear(expected, value.weight, value.bias));
}

TEST(Containers, ClonesIterateTheirOwnCopies) {
  manual_seed(4);
  Stack net;
  const std::shared_ptr<nn::Module> copy = net.clone();
  auto& twin = static_cast<Stack&>(*copy);
  const Tensor x = Tensor::randn({2, 4});
  expect_close(twin.forward(x), net.forward(x));
  size_t i = 0;
  for (const auto& layer : *twin.layers) {
    EXPECT_NE(layer.get(), (*net.layers)[i].get());
    const auto& mine = static_cast<const nn::Linear&>(*layer);
    EXPECT_FALSE(mine.weight.shares_storage_with(static_cast<const nn::Linear&>(*(*net.layers)[i]).weight));
    ++i;
  }
  EXPECT_EQ(i, 3u);
  const auto weight_of = [](const Stack& stack) { return static_cast<const nn::Linear&>(*(*stack.layers)[0]).weight; };
  const std::vector<float> before = weight_of(net).to_vector();
  weight_of(twin).detach().fill_(0.0);  // the copy alone changes
  EXPECT_EQ(weight_of(twin).to_vector(), std::vector<float>(16, 0.0f));
  EXPECT_EQ(weight_of(net).to_vector(), before);
}

TEST(Containers, StateRoundTripsThroughSaveAndLoad) {
  manual_seed(5);
  Stack saved, loaded;
  const std::string path = testing::scratch_path("stack.safetensors");
  save(saved, path);
  load(loaded, path);
  const Tensor x = Tensor::randn({3, 4});
  expect_close(loaded.forward(x), saved.forward(x), 0, 0);
}

TEST(Containers, BadUsesAreErrors) {
  nn::ModuleList list;
  EXPECT_ERROR(list.push_back(nullptr), "nn::ModuleList::push_back: module 0 is null");
  EXPECT_ERROR(list[0], "nn::ModuleList: index 0 is out of range for 0 modules");
  list.push_back(std::make_shared<nn::ReLU>());
  EXPECT_ERROR(list.forward(Tensor::ones({2})), "ModuleList");
  nn::ModuleDict dict;
  dict.insert("a", std::make_shared<nn::ReLU>());
  EXPECT_ERROR(dict.insert("a", std::make_shared<nn::ReLU>()), "already has a submodule named 'a'");
  EXPECT_ERROR(dict.insert("a.b", std::make_shared<nn::ReLU>()), "contains '.'");
  EXPECT_ERROR(dict.insert("b", nullptr), "nn::ModuleDict::insert: module 'b' is null");
  EXPECT_ERROR(dict["c"], "nn::ModuleDict: no module named 'c' (1 modules)");
}

}  // namespace
}  // namespace tandem

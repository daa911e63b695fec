// Module buffers: registration, names and order, state_dict, save/load, to(), clone(), set_buffers, errors.

#include "support/test_support.h"

namespace tandem {
namespace {

// A layer with a parameter, two buffers (one int64) and a BatchNorm1d child.
class Stats : public nn::Cloneable<Stats> {
 public:
  Stats() {
    register_parameter("scale", scale);
    register_buffer("count", count);
    register_buffer("total", total);
    register_module("bn", bn);
  }
  Tensor forward(const Tensor& x) override { return bn->forward(x) * scale; }
  Tensor scale = Tensor::ones({2});
  Tensor count = Tensor::zeros({}, DType::Int64);
  Tensor total = Tensor::zeros({2});
  std::shared_ptr<nn::BatchNorm1d> bn = std::make_shared<nn::BatchNorm1d>(2);
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : named) names.push_back(name);
  return names;
}

TEST(ModuleBuffers, NamesOrderAndStateDict) {
  Stats stats;
  EXPECT_EQ(names_of(stats.named_buffers()),
            (std::vector<std::string>{"count", "total", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}));
  EXPECT_EQ(names_of(stats.named_parameters()), (std::vector<std::string>{"scale", "bn.weight", "bn.bias"}));
  EXPECT_EQ(names_of(stats.state_dict()),
            (std::vector<std::string>{"scale", "count", "total", "bn.weight", "bn.bias", "bn.running_mean",
                                      "bn.running_var", "bn.num_batches_tracked"}));
  EXPECT_EQ(stats.buffers().size(), 5u);
  EXPECT_EQ(stats.num_parameters(), 6);
  for (const Tensor& buffer : stats.buffers()) EXPECT_FALSE(buffer.requires_grad());
  // Buffers are the members themselves.
  EXPECT_EQ(stats.buffers()[1].data_ptr(), stats.total.data_ptr());
  nn::Sequential wrapped(std::make_shared<Stats>(), nn::ReLU());
  EXPECT_EQ(wrapped.named_buffers().front().first, "0.count");
}

TEST(ModuleBuffers, SaveAndLoadIncludeBuffers) {
  manual_seed(51);
  Stats trained;
  for (int i = 0; i < 3; ++i) trained(Tensor::randn({6, 2}) + 1.0f);
  trained.count.fill_(7);
  trained.total.fill_(2.5);
  const std::string path = testing::scratch_path("stats.safetensors");
  save(trained, path);
  EXPECT_EQ(names_of(load_tensors(path).tensors).size(), 8u);

  Stats fresh;
  load(fresh, path);
  EXPECT_EQ(fresh.count.item<int64_t>(), 7);
  EXPECT_EQ(fresh.bn->num_batches_tracked.item<int64_t>(), 3);
  testing::expect_close(fresh.bn->running_mean, trained.bn->running_mean);
  testing::expect_close(fresh.bn->running_var, trained.bn->running_var);
  testing::expect_close(fresh.total, trained.total);

  // A file of parameters only (no buffers) does not fit a module with buffers.
  save_tensors(trained.named_parameters(), path);
  EXPECT_ERROR(load(fresh, path), "load: checkpoint has no tensor 'count'");
  std::remove(path.c_str());
}

TEST(ModuleBuffers, ToMovesBuffersInPlace) {
  Stats stats;
  const Tensor running_mean = stats.bn->running_mean;
  stats.to(Device::cpu(1));
  for (const auto& [name, tensor] : stats.state_dict()) EXPECT_EQ(tensor.device(), Device::cpu(1)) << name;
  EXPECT_EQ(running_mean.device(), Device::cpu(1));  // the same tensor, moved
  EXPECT_EQ(stats.count.dtype(), DType::Int64);
  stats(Tensor::randn({4, 2}, Device::cpu(1)));
  EXPECT_EQ(stats.bn->num_batches_tracked.item<int64_t>(), 1);
}

TEST(ModuleBuffers, CloneCopiesBuffers) {
  manual_seed(52);
  Stats stats;
  stats(Tensor::randn({4, 2}));
  auto copy = std::static_pointer_cast<Stats>(stats.clone(Device::cpu(1)));
  EXPECT_EQ(copy->bn->running_mean.device(), Device::cpu(1));
  EXPECT_EQ(copy->count.dtype(), DType::Int64);
  EXPECT_FALSE(copy->bn->running_var.requires_grad());
  testing::expect_close(copy->bn->running_mean, stats.bn->running_mean);
  EXPECT_EQ(copy->bn->num_batches_tracked.item<int64_t>(), 1);
  // Independent: the original's updates do not reach the copy.
  stats(Tensor::randn({4, 2}) + 5.0f);
  EXPECT_EQ(copy->bn->num_batches_tracked.item<int64_t>(), 1);
  EXPECT_GT(testing::to_double(stats.bn->running_mean)[0], testing::to_double(copy->bn->running_mean)[0] + 0.2);
}

TEST(ModuleBuffers, SetBuffersChecksCountShapeAndDtype) {
  Stats stats;
  std::vector<Tensor> buffers = stats.buffers();
  buffers[1] = Tensor::full({2}, 3.0f);
  stats.set_buffers(buffers);
  testing::expect_values(stats.total, {3, 3}, {2});
  EXPECT_ERROR(stats.set_buffers({}), "nn::Module::set_buffers: Stats has 5 buffers but 0 tensors were given");
  buffers[0] = Tensor::zeros({});
  EXPECT_ERROR(stats.set_buffers(buffers), "nn::Module::set_buffers: 'count' is int64 of shape [] but the tensor "
                                           "given for it is float32 of shape []");
  buffers[0] = Tensor::zeros({}, DType::Int64);
  buffers[1] = Tensor::zeros({2}).set_requires_grad();
  EXPECT_ERROR(stats.set_buffers(buffers), "nn::Module::set_buffers: the tensor for 'total' requires grad");
}

class BadBuffers : public nn::Cloneable<BadBuffers> {
 public:
  explicit BadBuffers(int which) {
    if (which == 0) register_buffer("x", undefined);
    if (which == 1) register_buffer("x", trainable);
    if (which == 2) {
      register_parameter("x", trainable);
      register_buffer("x", plain);
    }
    if (which == 3) {
      register_buffer("x", plain);
      register_buffer("x", plain);
    }
    if (which == 4) register_buffer("a.b", plain);
    if (which == 5) {
      Tensor local = Tensor::zeros({1});
      register_buffer("local", local);
    }
  }
  Tensor forward(const Tensor& x) override { return x; }
  Tensor undefined;
  Tensor trainable = Tensor::zeros({1}).set_requires_grad();
  Tensor plain = Tensor::zeros({1});
};

TEST(ModuleBuffers, RegistrationErrors) {
  EXPECT_ERROR(BadBuffers(0), "nn::Module::register_buffer: buffer 'x' of BadBuffers is undefined");
  EXPECT_ERROR(BadBuffers(1), "nn::Module::register_buffer: buffer 'x' of BadBuffers requires grad");
  EXPECT_ERROR(BadBuffers(2), "nn::Module::register_buffer: BadBuffers already has a parameter named 'x'");
  EXPECT_ERROR(BadBuffers(3), "nn::Module::register_buffer: BadBuffers already has a buffer named 'x'");
  EXPECT_ERROR(BadBuffers(4), "nn::Module::register_buffer: name 'a.b' in BadBuffers contains '.'");
  EXPECT_ERROR(BadBuffers(5), "nn::Module::register_buffer: buffer 'local' of BadBuffers is not a member");
}

}  // namespace
}  // namespace tandem

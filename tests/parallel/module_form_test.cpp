// The module form of ReplicatedModule, written as a PyTorch user writes DataParallel / DDP code: out = model(x);
// loss.backward(); optimizer.step() with a plain optimizer over model->parameters(). Each result is checked against
// the same steps of one net on one device (the reference) on the whole batch (Note [Closing the step at the end of
// backward] and Note [Unreduced gradients are refused] in replicated.h).
#include "parallel/parallel_test_helpers.h"
#include "tandem/parallel/replicated.h"

namespace tandem::testing {
namespace {

using parallel::ReplicatedModule;

constexpr optim::AdamWOptions kAdamW{.lr = 0.01, .weight_decay = 0.01};

struct MicroBatch {
  Tensor x;
  Tensor y;
};

// 9 rows (uneven over 2 and 3 devices), 7 rows, and 1 row (fewer rows than devices), in turn.
MicroBatch batch(size_t step) {
  static const std::vector<int64_t> rows = {9, 7, 1};
  const int64_t n = rows[step % rows.size()];
  return {seeded_randn({n, 4}, Device::cpu(0), 300 + step), seeded_randn({n, 2}, Device::cpu(0), 400 + step)};
}

Tensor loss_of(nn::Module& model, const MicroBatch& b, Device device) {
  return nn::mse_loss(model(b.x.to(device)), b.y.to(device));
}

// `steps` AdamW steps of one net on devices[0] over the whole batches.
std::shared_ptr<TwoLayerNet> reference(Device device, size_t steps) {
  auto net = make_net(device);
  optim::AdamW adamw(net->parameters(), kAdamW);
  for (size_t step = 0; step < steps; ++step) {
    adamw.zero_grad();
    loss_of(*net, batch(step), device).backward();
    adamw.step();
  }
  return net;
}

class ModuleForm : public EveryDeviceSet {
 protected:
  Device master() const { return devices()[0]; }
  std::shared_ptr<ReplicatedModule> replicated(std::shared_ptr<nn::Module> net) const {
    return std::make_shared<ReplicatedModule>(std::move(net), devices(),
                                              parallel::ReplicatedOptions{.bucket_size = 64});
  }
};

TEST_P(ModuleForm, ForwardBackwardStepWithAPlainOptimizerEqualsOneDevice) {
  auto model = replicated(make_net(master()));
  EXPECT_EQ(model->parameters().size(), 4u);
  EXPECT_EQ(model->named_parameters().front().first, "module.fc1.weight");  // PyTorch's DataParallel names
  optim::AdamW adamw(model->parameters(), kAdamW);
  for (size_t step = 0; step < 12; ++step) {
    adamw.zero_grad();
    Tensor out = (*model)(batch(step).x);
    EXPECT_EQ(out.device(), master());
    nn::mse_loss(out, batch(step).y.to(master())).backward();
    adamw.step();
  }
  const auto expected = reference(master(), 12);
  expect_parameters_close(*model->module(), *expected, 1e-5, 1e-6);
  (void)(*model)(batch(0).x);  // the next forward hands the master's values to every replica
  for (size_t d = 1; d < devices().size(); ++d) expect_parameters_close(*model->replicas()[d], *expected, 1e-5, 1e-6);
}

// When backward returns, every replica's gradients hold the sum: the whole batch's gradient.
TEST_P(ModuleForm, WhenBackwardReturnsEveryReplicaHoldsTheWholeBatchsGradient) {
  auto model = replicated(make_net(master()));
  auto net = make_net(master());
  loss_of(*net, batch(0), master()).backward();
  loss_of(*model, batch(0), master()).backward();
  for (size_t d = 0; d < devices().size(); ++d) {
    SCOPED_TRACE("replica " + std::to_string(d));
    expect_gradients_close(*model->replicas()[d], gradients_of(*net), 1e-5, 1e-6);
  }
}

// The optimizer's zero_grad() between forward and backward (a common order) clears the master's gradients while the
// step is open: the reduction still counts each gradient once.
TEST_P(ModuleForm, ZeroGradBetweenForwardAndBackwardCountsEveryGradientOnce) {
  auto model = replicated(make_net(master()));
  optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (size_t step = 0; step < 6; ++step) {
    Tensor loss = loss_of(*model, batch(step), master());
    sgd.zero_grad();
    loss.backward();
    sgd.step();
  }
  auto net = make_net(master());
  optim::SGD expected(net->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (size_t step = 0; step < 6; ++step) {
    expected.zero_grad();
    loss_of(*net, batch(step), master()).backward();
    expected.step();
  }
  expect_parameters_close(*model->module(), *net, 1e-5, 1e-6);
}

// no_sync() keeps PyTorch's meaning: the micro-batches inside accumulate locally, a step on them is refused, and the
// next synced backward reduces the sum.
TEST_P(ModuleForm, NoSyncAccumulatesAndTheNextSyncedBackwardReducesTheSum) {
  auto model = replicated(make_net(master()));
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  {
    auto guard = model->no_sync();
    loss_of(*model, batch(0), master()).backward();
    EXPECT_ERROR(sgd.step(),
                 "optim::SGD::step: the gradient of 'fc1.weight' is not reduced over the replicas of ReplicatedModule: "
                 "the last backward ran inside no_sync()");
    loss_of(*model, batch(1), master()).backward();
  }
  loss_of(*model, batch(2), master()).backward();
  auto net = make_net(master());
  for (size_t step = 0; step < 3; ++step) loss_of(*net, batch(step), master()).backward();
  expect_gradients_close(*model->module(), gradients_of(*net), 1e-5, 1e-6);
  sgd.step();  // reduced now
}

TEST_P(ModuleForm, ASecondBackwardAfterOneForwardIsRefusedAtTheStep) {
  auto model = replicated(make_net(master()));
  optim::Adam adam(model->parameters(), {.lr = 0.01});
  Tensor loss = loss_of(*model, batch(0), master());
  loss.backward({}, /*retain_graph=*/true);
  adam.step();
  loss.backward();
  EXPECT_ERROR(adam.step(),
               "optim::Adam::step: the gradient of 'fc1.weight' is not reduced over the replicas of "
               "ReplicatedModule: a backward ran after the step's reduction had closed");
  adam.zero_grad();
  model->zero_grad();
  loss_of(*model, batch(1), master()).backward();
  adam.step();
}

// An evaluation in grad mode (a forward without backward) leaves nothing behind.
TEST_P(ModuleForm, AForwardWithoutBackwardIsDropped) {
  auto model = replicated(make_net(master()));
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  (void)(*model)(batch(1).x);
  (void)(*model)(batch(2).x);
  loss_of(*model, batch(0), master()).backward();
  sgd.step();
  auto net = make_net(master());
  optim::SGD expected(net->parameters(), {.lr = 0.1});
  loss_of(*net, batch(0), master()).backward();
  expected.step();
  expect_parameters_close(*model->module(), *net, 1e-5, 1e-6);
}

// The identity in forward; its backward throws while `armed` (after the layers behind it got their gradients).
struct ThrowingIdentity : autograd::Function {
  static inline bool armed = false;
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0].detach()}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (armed) throw Error("ThrowingIdentity: backward throws");
    return {g[0]};
  }
};

class BreakableNet : public nn::Cloneable<BreakableNet> {
 public:
  explicit BreakableNet(Device device) : net(make_net(device)) { register_module("net", net); }
  Tensor forward(const Tensor& x) override {
    Tensor hidden = tanh(net->fc1->forward(x));
    return net->fc2->forward(autograd::apply_one(std::make_shared<ThrowingIdentity>(), {hidden}));
  }
  std::shared_ptr<TwoLayerNet> net;
};

TEST_P(ModuleForm, ABackwardThatThrowsIsDiscardedAtTheNextForward) {
  auto model = replicated(std::make_shared<BreakableNet>(master()));
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  ThrowingIdentity::armed = true;
  EXPECT_ERROR(loss_of(*model, batch(0), master()).backward(), "ThrowingIdentity: backward throws");
  ThrowingIdentity::armed = false;
  EXPECT_ERROR(sgd.step(), "the backward after the last forward did not finish");
  EXPECT_ERROR((*model)(batch(0).x),
               "the backward of the previous forward did not finish (it threw?), so its "
               "gradients were partial; they were discarded (zeroed)");
  loss_of(*model, batch(0), master()).backward();  // from zero again
  sgd.step();
  auto net = std::make_shared<BreakableNet>(master());
  optim::SGD expected(net->parameters(), {.lr = 0.1});
  loss_of(*net, batch(0), master()).backward();
  expected.step();
  expect_parameters_close(*model->module(), *net, 1e-5, 1e-6);
}

TEST_P(ModuleForm, TrainAndEvalReachEveryReplicaAtOnce) {
  auto model = replicated(make_net(master()));
  model->eval();
  for (const auto& replica : model->replicas()) EXPECT_FALSE(replica->is_training());
  model->module()->train();
  for (const auto& replica : model->replicas()) EXPECT_TRUE(replica->is_training());
}

// fc2 is left out of the graph on purpose.
class HalfUsedNet : public nn::Cloneable<HalfUsedNet> {
 public:
  explicit HalfUsedNet(Device device) : net(make_net(device, 4, 2, 2)) { register_module("net", net); }
  Tensor forward(const Tensor& x) override { return net->fc1->forward(x); }
  std::shared_ptr<TwoLayerNet> net;
};

TEST_P(ModuleForm, UnusedParametersTakePartWithZerosOrAreAnError) {
  auto model = replicated(std::make_shared<HalfUsedNet>(master()));
  EXPECT_TRUE(model->find_unused_parameters());
  const MicroBatch b = batch(0);
  nn::mse_loss((*model)(b.x), b.y.to(master())).backward();
  auto net = std::make_shared<HalfUsedNet>(master());
  nn::mse_loss((*net)(b.x.to(master())), b.y.to(master())).backward();
  const auto grads = gradients_of(*model->module());
  expect_close(grads[0], net->net->fc1->weight.grad());
  expect_values(grads[2], std::vector<double>(4, 0.0), {2, 2});  // fc2.weight: zeros

  model->set_find_unused_parameters(false);
  model->zero_grad();
  EXPECT_ERROR(nn::mse_loss((*model)(b.x), b.y.to(master())).backward(),
               "parallel::ReplicatedModule: 2 parameters got no gradient in this backward ('net.fc2.weight', "
               "'net.fc2.bias'), but find_unused_parameters is false");
}

TEST_P(ModuleForm, Errors) {
  auto net = make_net(master());
  auto model = replicated(net);
  EXPECT_ERROR((*model)(Tensor()), "parallel::ReplicatedModule::forward: input 0 is undefined");
  EXPECT_ERROR(model->forward_all({}), "parallel::ReplicatedModule::forward: got no inputs");
  EXPECT_ERROR(replicated(net), "Tensor::set_grad_check: the tensor's gradient is checked already");
  EXPECT_ERROR(model->clone(), "ReplicatedModule");
  model->prepare_for_backward(devices().size());
  EXPECT_ERROR((*model)(batch(0).x), "parallel::ReplicatedModule::forward: the step opened by prepare_for_backward()");
  model->reduce_gradients();
}

// A ReplicatedModule destroyed leaves its master as it found it: no check, no hook, so the net trains on its own.
TEST_P(ModuleForm, DestroyingItLeavesTheMasterFreeOfChecks) {
  auto net = make_net(master());
  {
    auto model = replicated(net);
    auto guard = model->no_sync();
    loss_of(*model, batch(0), master()).backward();
  }
  net->zero_grad();
  optim::SGD sgd(net->parameters(), {.lr = 0.1});
  loss_of(*net, batch(0), master()).backward();
  sgd.step();
  auto again = replicated(net);  // no check left behind
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(ModuleForm);

}  // namespace
}  // namespace tandem::testing

// DistributedDataParallel written as PyTorch users write it, across the processes of a job: out = (*ddp)(x);
// loss.backward(); optimizer.step() with a plain optimizer over ddp->parameters(), and nothing else. Every rank
// feeds its slice of each global batch; the result must be one net on one device trained on the whole batches.
#include "distributed/group_devices.h"
#include "parallel/distributed_test_helpers.h"
#include "support/tied_net.h"

namespace tandem::testing {
namespace {

using parallel::DistributedDataParallel;

constexpr optim::AdamWOptions kAdamW{.lr = 0.005, .weight_decay = 0.01};
constexpr int64_t kGlobalRows = 12;  // divides evenly over 1, 2, 3, 4 and 6 devices

DistributedBatch global_batch(size_t step) {
  return {seeded_randn({kGlobalRows, 10}, Device::cpu(0), 900 + step),
          seeded_randn({kGlobalRows, 1}, Device::cpu(0), 950 + step)};
}

class DdpModuleForm : public OnGroupDevices {
 protected:
  Device device() const { return group_->devices()[0]; }
  // This rank's rows of a global batch: an equal contiguous slice per process.
  Tensor slice(const Tensor& t) const {
    const int64_t rows = kGlobalRows / group_->size();
    return t.narrow(0, rows * group_->rank(), rows);
  }
  double atol() const { return GetParam() == GroupDevices::CUDA ? 1e-5 : 1e-7; }
};

TEST_P(DdpModuleForm, FiftyAdamWStepsEqualOneDeviceOnTheWholeBatches) {
  auto ddp = std::make_shared<DistributedDataParallel>(distributed_net(device()), group_);
  optim::AdamW adamw(ddp->parameters(), kAdamW);
  for (size_t step = 0; step < 50; ++step) {
    const DistributedBatch b = global_batch(step);
    adamw.zero_grad();
    Tensor out = (*ddp)(slice(b.x));
    nn::mse_loss(out, slice(b.y).to(device())).backward();
    adamw.step();
  }
  auto net = distributed_net();
  optim::AdamW expected(net->parameters(), kAdamW);
  for (size_t step = 0; step < 50; ++step) {
    const DistributedBatch b = global_batch(step);
    expected.zero_grad();
    nn::mse_loss((*net)(b.x), b.y).backward();
    expected.step();
  }
  expect_parameters_close(*ddp->module(), *net, 1e-6, atol());
}

// The misuse a new user makes: stepping on the gradients of a backward inside no_sync(). Every rank refuses it on
// its own (no collective is involved, so no rank waits for another), and the job goes on.
TEST_P(DdpModuleForm, SteppingOnGradientsThatWereNotReducedIsAnErrorOnEveryRank) {
  auto ddp = std::make_shared<DistributedDataParallel>(distributed_net(device()), group_);
  optim::SGD sgd(ddp->parameters(), {.lr = 0.1});
  const DistributedBatch b = global_batch(0);
  {
    auto guard = ddp->no_sync();
    nn::mse_loss((*ddp)(slice(b.x)), slice(b.y).to(device())).backward();
  }
  if (group_->size() > 1 || group_->devices().size() > 1) {
    EXPECT_ERROR(sgd.step(), "optim::SGD::step: the gradient of 'fc1.weight' is not reduced over the ");
  }
  nn::mse_loss((*ddp)(slice(b.x)), slice(b.y).to(device())).backward();  // reduces both micro-batches
  sgd.step();
  auto net = distributed_net();
  optim::SGD expected(net->parameters(), {.lr = 0.1});
  for (int i = 0; i < 2; ++i) nn::mse_loss((*net)(b.x), b.y).backward();
  expected.step();
  expect_parameters_close(*ddp->module(), *net, 1e-6, atol());
}

// Multiplies by its buffer.
class Scaled : public nn::Cloneable<Scaled> {
 public:
  explicit Scaled(Device device) : weight(Tensor::ones({1}, device)), scale(Tensor::ones({1}, device)) {
    register_parameter("weight", weight);
    register_buffer("scale", scale);
  }
  Tensor forward(const Tensor& x) override { return x * weight * scale; }
  Tensor weight;
  Tensor scale;
};

TEST_P(DdpModuleForm, BroadcastBuffersGivesEveryRankRankZerosBuffersBeforeEachForward) {
  for (const bool broadcast : {true, false}) {
    SCOPED_TRACE(broadcast ? "broadcast_buffers" : "own buffers");
    auto net = std::make_shared<Scaled>(device());
    auto ddp = std::make_shared<DistributedDataParallel>(net, group_,
                                                         parallel::DistributedOptions{.broadcast_buffers = broadcast});
    net->scale.fill_(group_->rank() + 1.0);
    NoGradGuard no_grad;
    const Tensor out = (*ddp)(Tensor::ones({2, 1}, device()));
    const double expected = broadcast ? 1.0 : group_->rank() + 1.0;
    expect_values(out, {expected, expected}, {2, 1});
    expect_values(net->scale, {expected}, {1});
  }
}

// A parameter left out of the graph on one rank only (data-dependent control flow): with find_unused_parameters it
// takes part with zeros there, and the job stays in step; without it the backward is an Error on that rank.
class SometimesSkipped : public nn::Cloneable<SometimesSkipped> {
 public:
  explicit SometimesSkipped(Device device) : net(distributed_net(device)), extra(Tensor::ones({1}, device)) {
    register_module("net", net);
    register_parameter("extra", extra);
  }
  Tensor forward(const Tensor& x) override { return use_extra ? net->forward(x) * extra : net->forward(x); }
  std::shared_ptr<TwoLayerNet> net;
  Tensor extra;
  bool use_extra = true;
};

TEST_P(DdpModuleForm, FindUnusedParametersReducesZerosForAParameterOneRankSkips) {
  auto model = std::make_shared<SometimesSkipped>(device());
  model->use_extra = group_->rank() != 0;
  auto ddp = std::make_shared<DistributedDataParallel>(model, group_,
                                                       parallel::DistributedOptions{.find_unused_parameters = true});
  const DistributedBatch b = global_batch(1);
  nn::mse_loss((*ddp)(slice(b.x)), slice(b.y).to(device())).backward();
  // extra's gradient: the average over the processes of each one's (zero on rank 0), the same on every rank.
  const std::vector<float> local = model->extra.grad().to_vector();
  std::vector<Tensor> all;
  for (const Device& d : group_->devices()) all.push_back(Tensor::from_vector(local, {1}, d));
  group_->all_reduce(all, comm::ReduceOp::Sum);
  EXPECT_NEAR(all[0].item(), local[0] * static_cast<float>(group_->world_devices()), 1e-5);
  if (group_->size() == 1) return;
  EXPECT_NE(local[0], 0.0f) << "rank 0's zero was averaged with the other ranks' gradients";

  auto strict_model = std::make_shared<SometimesSkipped>(device());
  strict_model->use_extra = group_->rank() != 0;
  auto strict = std::make_shared<DistributedDataParallel>(strict_model, group_);
  if (group_->rank() == 0) {
    EXPECT_ERROR(nn::mse_loss((*strict)(slice(b.x)), slice(b.y).to(device())).backward(),
                 "1 parameter got no gradient in this backward ('extra'), but find_unused_parameters is false");
  } else {
    nn::mse_loss((*strict)(slice(b.x)), slice(b.y).to(device())).backward();
  }
}

// Note [Shared parameters] in nn/module.h: a tied weight is one parameter with one place in the buckets, reduced
// once per step over every process.
TEST_P(DdpModuleForm, ATiedNetTrainsAsOneDeviceOnTheWholeBatches) {
  auto ddp = std::make_shared<DistributedDataParallel>(make_tied_net(device(), 2), group_);
  EXPECT_EQ(ddp->replicated().gradient_layout().parameter_count(), 5u);
  optim::AdamW adamw(ddp->parameters(), kAdamW);
  auto net = make_tied_net(Device::cpu(0), 2);
  optim::AdamW expected(net->parameters(), kAdamW);
  for (size_t step = 0; step < 20; ++step) {
    const DistributedBatch b = global_batch(step);
    adamw.zero_grad();
    nn::mse_loss((*ddp)(slice(b.x)), slice(b.y).to(device())).backward();
    adamw.step();
    expected.zero_grad();
    nn::mse_loss((*net)(b.x), b.y).backward();
    expected.step();
  }
  expect_parameters_close(*ddp->module(), *net, 1e-6, atol());
  const auto& trained = dynamic_cast<const TiedNet&>(*ddp->module());
  EXPECT_TRUE(trained.decoder->weight.is_same(trained.encoder->weight));
}

// Every process must tie alike: a model untied on one rank has another parameter count, refused on every rank.
TEST_P(DdpModuleForm, AModelTiedOnSomeRanksOnlyIsRefusedOnEveryRank) {
  if (group_->size() == 1) GTEST_SKIP() << "needs several processes";
  std::shared_ptr<nn::Module> model = make_tied_net(device());
  if (group_->rank() == 1) model = untied_copy(dynamic_cast<const TiedNet&>(*model));
  EXPECT_ERROR(std::make_shared<DistributedDataParallel>(model, group_),
               "the processes' models differ: rank 1 has 6 parameters but rank 0 has 5");
}

TANDEM_INSTANTIATE_ON_GROUP_DEVICES(LocalDevices, DdpModuleForm);

}  // namespace
}  // namespace tandem::testing

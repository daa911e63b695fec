// ReplicatedModule::forward_backward sums each gradient bucket while backward runs (Note [Overlapped gradient
// reduction]); on CPU devices the all-reduces are synchronous, so these tests check that the bookkeeping (hooks,
// buckets completed replica by replica, idle replicas, leftover buckets, accumulation) gives one device's numbers.

#include <atomic>
#include <functional>

#include "parallel/parallel_test_helpers.h"

namespace tandem::testing {
namespace {

constexpr optim::SGDOptions kOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3};
// Even and uneven batches, and batches with fewer rows than devices (some replicas idle).
const std::vector<int64_t> kBatchRows = {12, 13, 2, 7, 1, 9};

struct Batch {
  Tensor x;
  Tensor y;
};

Batch batch(size_t step, Device device) {
  return {seeded_randn({kBatchRows[step], 10}, device, 900 + step),
          seeded_randn({kBatchRows[step], 1}, device, 950 + step)};
}

// A batch cut into the replicas' shares: inputs over every device, targets over the devices that got rows.
struct Shards {
  std::vector<Tensor> inputs;
  std::vector<Tensor> targets;
};

Shards shard(const parallel::ReplicatedModule& model, const Batch& b) {
  Shards shards{.inputs = comm::scatter(b.x, model.devices())};
  const std::vector<Device> used(model.devices().begin(),
                                 model.devices().begin() + static_cast<std::ptrdiff_t>(shards.inputs.size()));
  shards.targets = comm::scatter(b.y, used);
  return shards;
}

// A replica's MSE weighted by its share of the batch's rows: summed over replicas, the mean over the whole batch.
Tensor weighted_loss(const Tensor& output, const Tensor& target, const Batch& b) {
  return nn::mse_loss(output, target) * (static_cast<float>(target.size(0)) / static_cast<float>(b.x.size(0)));
}

// One step through forward_backward with the weighted losses; `reduce` as forward_backward's.
std::vector<Tensor> forward_backward_step(parallel::ReplicatedModule& model, const Batch& b, bool reduce = true) {
  const Shards shards = shard(model, b);
  return model.forward_backward(
      shards.inputs, [&](size_t i, const Tensor& output) { return weighted_loss(output, shards.targets[i], b); },
      reduce);
}

// How manual_step opens its step: not at all, or with prepare_for_backward(n, reduce).
enum class Prepare { No, Reducing, NotReducing };

// The same step without forward_backward: forward, one backward over every replica's loss, reduce_gradients().
void manual_step(parallel::ReplicatedModule& model, const Batch& b, Prepare prepare = Prepare::No) {
  const Shards shards = shard(model, b);
  const std::vector<Tensor> outputs = model.forward_replicas(shards.inputs);
  if (prepare != Prepare::No) {
    model.prepare_for_backward(outputs.size(), /*reduce=*/prepare == Prepare::Reducing);
    EXPECT_EQ(model.step_open(), prepare == Prepare::Reducing) << "only a reducing backward opens a step";
  }
  std::vector<Tensor> losses;
  for (size_t i = 0; i < outputs.size(); ++i) losses.push_back(weighted_loss(outputs[i], shards.targets[i], b));
  autograd::backward(losses);
  model.reduce_gradients();
}

void expect_every_replica_has(const parallel::ReplicatedModule& model, const std::vector<Tensor>& gradients) {
  for (size_t d = 0; d < model.size(); ++d) {
    SCOPED_TRACE("replica " + std::to_string(d));
    expect_gradients_close(*model.replicas()[d], gradients);
  }
}

// Trains `model`, replicas of make_net(devices[0], 10, 20, 1), beside that net on one device over the batches of
// kBatchRows, with SGD (kOptions) on both. Each step, `run_step` does the replicas' forward and backward and
// returns their losses, if it has them. Then every replica must hold the one-device gradients, the losses must add
// up to the one-device loss, and after the SGD steps the master must hold the one-device parameters and every other
// replica exactly the master's.
void expect_training_like_one_device(
    parallel::ReplicatedModule& model,
    const std::function<std::vector<Tensor>(parallel::ReplicatedModule&, const Batch&)>& run_step) {
  const Device device = model.devices().front();
  auto reference = make_net(device, 10, 20, 1);
  parallel::ReplicatedSGD sgd(model, kOptions);
  optim::SGD reference_sgd(reference->parameters(), kOptions);
  for (size_t step = 0; step < kBatchRows.size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Batch b = batch(step, device);
    model.zero_grad();
    const std::vector<Tensor> losses = run_step(model, b);
    reference_sgd.zero_grad();
    const Tensor reference_loss = nn::mse_loss(reference->forward(b.x), b.y);
    reference_loss.backward();
    expect_every_replica_has(model, gradients_of(*reference));
    if (!losses.empty()) {
      double total = 0.0;
      for (const Tensor& loss : losses) total += loss.item();
      EXPECT_NEAR(total, reference_loss.item(), 1e-5);
    }
    sgd.step();
    reference_sgd.step();
    expect_parameters_close(*model.module(), *reference);
    for (size_t d = 1; d < model.size(); ++d) expect_parameters_close(*model.replicas()[d], *model.module(), 0.0, 0.0);
  }
}

class OverlappedReduction : public EveryDeviceSet {};

// Several buckets (128 bytes: [fc2.bias, fc2.weight], [fc1.bias], [fc1.weight]), idle replicas on the small
// batches; reduce_gradients() after forward_backward must not sum a second time.
TEST_P(OverlappedReduction, ForwardBackwardGivesOneDevicesGradientsAndParametersEachStep) {
  const auto devices = this->devices();
  parallel::ReplicatedModule model(make_net(devices[0], 10, 20, 1), devices, {.bucket_size = 128});
  ASSERT_EQ(model.bucket_count(), 3u);
  expect_training_like_one_device(model, [](parallel::ReplicatedModule& replicas, const Batch& b) {
    std::vector<Tensor> losses = forward_backward_step(replicas, b);
    replicas.reduce_gradients();
    return losses;
  });
}

// The hooks stay installed but only act inside forward_backward: steps without it still sum exactly once.
TEST_P(OverlappedReduction, StepsWithAndWithoutForwardBackwardMix) {
  const auto devices = this->devices();
  parallel::ReplicatedModule model(make_net(devices[0], 10, 20, 1), devices, {.bucket_size = 64});
  bool through_forward_backward = false;
  expect_training_like_one_device(model, [&](parallel::ReplicatedModule& replicas, const Batch& b) {
    through_forward_backward = !through_forward_backward;
    if (through_forward_backward) return forward_backward_step(replicas, b);
    manual_step(replicas, b);
    return std::vector<Tensor>();
  });
}

// Note [Accumulating onto sums]: two forward_backward calls without zero_grad() in between give the gradient of
// both batches, as two backward passes on one device do.
TEST_P(OverlappedReduction, GradientsAccumulateOverCallsLikeOnOneDevice) {
  const auto devices = this->devices();
  auto reference = make_net(devices[0], 10, 20, 1);
  parallel::ReplicatedModule model(make_net(devices[0], 10, 20, 1), devices, {.bucket_size = 100});
  model.zero_grad();
  for (size_t step = 0; step < 3; ++step) {
    const Batch b = batch(step, devices[0]);
    forward_backward_step(model, b);
    nn::mse_loss(reference->forward(b.x), b.y).backward();
  }
  model.reduce_gradients();  // already sums: nothing to do
  expect_every_replica_has(model, gradients_of(*reference));
}

// A net with a parameter that forward never uses: it gets no gradient, so its bucket (here the only one, shared
// with every other parameter) never completes during backward and is summed once the replicas are done.
class WithUnusedParameter : public nn::Cloneable<WithUnusedParameter> {
 public:
  explicit WithUnusedParameter(Device device) : unused(Tensor::ones({3}, device)) {
    manual_seed(4321);
    fc1 = std::make_shared<nn::Linear>(4, 5, true, device);
    fc2 = std::make_shared<nn::Linear>(5, 2, true, device);
    register_module("fc1", fc1);
    register_parameter("unused", unused);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(tanh(fc1->forward(x))); }
  std::shared_ptr<nn::Linear> fc1;
  Tensor unused;
  std::shared_ptr<nn::Linear> fc2;
};

TEST_P(OverlappedReduction, ABucketWithAParameterWithoutGradientIsSummedAtTheEnd) {
  const auto devices = this->devices();
  parallel::ReplicatedModule model(std::make_shared<WithUnusedParameter>(devices[0]), devices);
  ASSERT_EQ(model.bucket_count(), 1u);
  auto reference = std::make_shared<WithUnusedParameter>(devices[0]);
  std::vector<Tensor> inputs;
  for (size_t d = 0; d < devices.size(); ++d) inputs.push_back(seeded_randn({3, 4}, devices[d], 60 + d));
  model.forward_backward(inputs,
                         [](size_t i, const Tensor& output) { return sum(output) * static_cast<float>(i + 1); });
  for (size_t d = 0; d < devices.size(); ++d)
    (sum(reference->forward(inputs[d].to(devices[0]))) * static_cast<float>(d + 1)).backward();
  std::vector<Tensor> expected = gradients_of(*reference);
  const auto named = reference->named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    if (named[i].first != "unused") continue;
    ASSERT_FALSE(expected[i].defined());  // no gradient on one device; zeros in the buffers
    expected[i] = Tensor::zeros({3}, devices[0]);
  }
  expect_every_replica_has(model, expected);
}

TEST_P(OverlappedReduction, ASecondGradientInOneCallIsAnErrorAndTheModuleStaysUsable) {
  const auto devices = this->devices();
  parallel::ReplicatedModule model(make_net(devices[0]), devices, {.bucket_size = 40});
  std::vector<Tensor> inputs;
  for (size_t d = 0; d < devices.size(); ++d) inputs.push_back(seeded_randn({2, 4}, devices[d], 70 + d));
  // One replica only, so that no other replica's thread writes into the buffers while the sums run.
  const auto backward_too_early = [&](size_t i, const Tensor& output) {
    sum(model.replicas()[i]->forward(inputs[i])).backward();  // a backward of its own: one too many
    return sum(output);
  };
  EXPECT_ERROR(model.forward_backward({inputs[0]}, backward_too_early),
               "' of replica 0 received a second gradient in one step, but its bucket is summed once");

  model.zero_grad();
  model.forward_backward(inputs, [](size_t, const Tensor& output) { return sum(output); });
  auto reference = make_net(devices[0]);
  for (size_t d = 0; d < devices.size(); ++d) sum(reference->forward(inputs[d].to(devices[0]))).backward();
  expect_every_replica_has(model, gradients_of(*reference));
}

TEST_P(OverlappedReduction, DestroyingTheModuleRemovesTheHooksFromTheMaster) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  { parallel::ReplicatedModule model(net, devices); }
  const Tensor x = seeded_randn({3, 4}, devices[0], 80);
  net->zero_grad();
  sum(net->forward(x)).backward();  // would call into the destroyed module if a hook were left behind
  auto reference = make_net(devices[0]);
  sum(reference->forward(x)).backward();
  expect_gradients_close(*net, gradients_of(*reference));
}

// comm's collectives, counting the buckets started during a step (from the replicas' threads).
parallel::GradientCollective counting(std::shared_ptr<std::atomic<int>> starts) {
  parallel::GradientCollective collective;
  collective.start = [starts](std::vector<Tensor>& slices, const std::vector<StreamMarker>& ready) {
    ++*starts;
    return comm::all_reduce_async(slices, ready);
  };
  return collective;
}

// prepare_for_backward() opens a step for the caller's own backward: each bucket starts during backward, as soon as
// every replica's part of it is final, and reduce_gradients() closes the step with the numbers of one device.
TEST_P(OverlappedReduction, APreparedBackwardIsSummedWhileItRuns) {
  const auto devices = this->devices();
  const auto starts = std::make_shared<std::atomic<int>>(0);
  parallel::ReplicatedModule model(make_net(devices[0], 10, 20, 1), devices,
                                   {.bucket_size = 128, .collective = counting(starts)});
  ASSERT_EQ(model.bucket_count(), 3u);
  expect_training_like_one_device(model, [&](parallel::ReplicatedModule& replicas, const Batch& b) {
    *starts = 0;
    manual_step(replicas, b, Prepare::Reducing);
    EXPECT_EQ(*starts, 3) << "every bucket started during backward";
    EXPECT_FALSE(replicas.step_open());
    return std::vector<Tensor>();
  });
}

TEST_P(OverlappedReduction, AStepLeftOpenRefusesTheNextUntilReduceGradientsClosesIt) {
  const auto devices = this->devices();
  parallel::ReplicatedModule model(make_net(devices[0]), devices, {.bucket_size = 40});
  EXPECT_ERROR(model.prepare_for_backward(devices.size() + 1),
               "parallel::ReplicatedModule::prepare_for_backward: got " + std::to_string(devices.size() + 1) +
                   " active replicas but there are " + std::to_string(devices.size()));
  model.prepare_for_backward(devices.size());
  EXPECT_TRUE(model.step_open());
  const std::string open =
      ": the step opened by prepare_for_backward() is still open; call reduce_gradients() after "
      "the backward";
  EXPECT_ERROR(model.prepare_for_backward(1), "parallel::ReplicatedModule::prepare_for_backward" + open);
  EXPECT_ERROR(model.zero_grad(), "parallel::ReplicatedModule::zero_grad" + open);
  std::vector<Tensor> inputs;
  for (size_t d = 0; d < devices.size(); ++d) inputs.push_back(seeded_randn({2, 4}, devices[d], 90 + d));
  const auto loss = [](size_t, const Tensor& output) { return sum(output); };
  EXPECT_ERROR(model.forward_backward(inputs, loss), "parallel::ReplicatedModule::forward_backward" + open);
  model.reduce_gradients();  // no backward came: sums what the buffers hold (zeros)
  EXPECT_FALSE(model.step_open());

  model.zero_grad();
  model.forward_backward(inputs, loss);
  auto reference = make_net(devices[0]);
  for (size_t d = 0; d < devices.size(); ++d) sum(reference->forward(inputs[d].to(devices[0]))).backward();
  expect_every_replica_has(model, gradients_of(*reference));
}

// Gradient accumulation: backward passes without reduction (forward_backward(..., false), prepare_for_backward(n,
// false)) start no collective; the next reduction sums them all, and sums held before count once.
TEST_P(OverlappedReduction, BackwardWithoutReductionAccumulatesUntilTheNextSum) {
  const auto devices = this->devices();
  auto reference = make_net(devices[0], 10, 20, 1);
  const auto starts = std::make_shared<std::atomic<int>>(0);
  parallel::ReplicatedModule model(make_net(devices[0], 10, 20, 1), devices,
                                   {.bucket_size = 100, .collective = counting(starts)});
  model.zero_grad();
  forward_backward_step(model, batch(0, devices[0]));  // sums
  const int summed = *starts;
  forward_backward_step(model, batch(1, devices[0]), /*reduce=*/false);
  forward_backward_step(model, batch(2, devices[0]), /*reduce=*/false);
  EXPECT_EQ(*starts, summed) << "no collective while accumulating";
  EXPECT_FALSE(model.step_open());
  model.reduce_gradients();
  for (size_t step = 0; step < 3; ++step) {
    const Batch b = batch(step, devices[0]);
    nn::mse_loss(reference->forward(b.x), b.y).backward();
  }
  expect_every_replica_has(model, gradients_of(*reference));

  // The same with the caller's backward: prepare_for_backward(n, false) opens no step.
  const Batch b = batch(3, devices[0]);
  manual_step(model, b, Prepare::NotReducing);
  nn::mse_loss(reference->forward(b.x), b.y).backward();
  expect_every_replica_has(model, gradients_of(*reference));
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(OverlappedReduction);

}  // namespace
}  // namespace tandem::testing

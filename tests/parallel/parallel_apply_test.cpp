// parallel::parallel_apply and run_on_devices: results, worker threads, grad mode and autocast state, failures,
// concurrency.

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "parallel/parallel_test_helpers.h"

namespace tandem::testing {
namespace {

// Records the thread and grad mode of its last forward; throws when its input's first element is negative.
class Probe : public nn::Cloneable<Probe> {
 public:
  Tensor forward(const Tensor& x) override {
    thread = std::this_thread::get_id();
    grad_mode = GradMode::is_enabled();
    if (x.to_vector().front() < 0) {
      if (throw_std) throw std::runtime_error("negative input");
      TANDEM_FAIL("Probe: negative input");
    }
    return x * 2.0f;
  }
  std::thread::id thread;
  bool grad_mode = false;
  bool throw_std = false;
};

std::vector<std::shared_ptr<nn::Module>> probes(size_t count) {
  std::vector<std::shared_ptr<nn::Module>> modules;
  for (size_t i = 0; i < count; ++i) modules.push_back(std::make_shared<Probe>());
  return modules;
}

std::thread::id thread_of(const std::shared_ptr<nn::Module>& module) {
  return std::static_pointer_cast<Probe>(module)->thread;
}

std::vector<Tensor> inputs_on(const std::vector<Device>& devices, float first = 1.0f) {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < devices.size(); ++i)
    inputs.push_back(Tensor::from_vector({first, static_cast<float>(i)}, {1, 2}, devices[i]));
  return inputs;
}

class ParallelApply : public EveryDeviceSet {};

TEST_P(ParallelApply, OutputIIsReplicaIOnInputI) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  const auto replicas = parallel::replicate(net, devices);
  std::vector<Tensor> inputs;
  for (size_t d = 0; d < devices.size(); ++d)
    inputs.push_back(seeded_randn({static_cast<int64_t>(d) + 1, 4}, devices[d], 60 + d));
  const std::vector<Tensor> outputs = parallel::parallel_apply(replicas, inputs);
  ASSERT_EQ(outputs.size(), devices.size());
  for (size_t d = 0; d < devices.size(); ++d) {
    EXPECT_EQ(outputs[d].device(), devices[d]);
    EXPECT_FALSE(outputs[d].is_leaf());
    expect_close(outputs[d], net->forward(inputs[d].to(devices[0])));
  }
}

TEST_P(ParallelApply, DevicesMoveEachOutput) {
  const auto devices = this->devices();
  const std::vector<Device> destinations(devices.size(), devices.back());
  const std::vector<Tensor> outputs =
      parallel::parallel_apply(probes(devices.size()), inputs_on(devices), destinations);
  for (size_t i = 0; i < outputs.size(); ++i) {
    EXPECT_EQ(outputs[i].device(), devices.back());
    expect_values(outputs[i], {2.0, 2.0 * static_cast<double>(i)}, {1, 2});
  }
}

TEST_P(ParallelApply, RunsOnOnePersistentWorkerPerDevice) {
  const auto devices = this->devices();
  const auto first = probes(devices.size());
  const auto second = probes(devices.size());
  parallel::parallel_apply(first, inputs_on(devices));
  parallel::parallel_apply(second, inputs_on(devices));
  // Replica 0 runs on the caller in its idle worker's place (Note [The caller takes a turn]), every other replica on
  // its device's worker: the same thread in both calls, and one thread per device.
  EXPECT_EQ(thread_of(first[0]), std::this_thread::get_id());
  EXPECT_EQ(thread_of(second[0]), std::this_thread::get_id());
  for (size_t i = 1; i < devices.size(); ++i) {
    EXPECT_NE(thread_of(first[i]), std::this_thread::get_id());
    EXPECT_EQ(thread_of(first[i]), thread_of(second[i])) << "device " << devices[i] << " changed worker";
    for (size_t j = 1; j < i; ++j) EXPECT_NE(thread_of(first[i]), thread_of(first[j]));
  }
}

// While device 0's worker is busy with another caller's replica, replica 0 of a second call waits for its turn on
// that worker instead of running beside it on the caller.
TEST_P(ParallelApply, ReplicaZeroWaitsForItsBusyWorker) {
  const auto devices = this->devices();
  const auto busy = probes(1);
  // Made before the busy task starts: on GPUs the first tensors of a thread can take longer than the release delay.
  const auto modules = probes(devices.size());
  const auto inputs = inputs_on(devices);
  const auto busy_input = inputs_on({devices[0]});
  std::atomic<bool> started = false;
  std::atomic<bool> release = false;
  std::thread other([&] {
    parallel::run_on_devices({[&] {
                                (void)busy[0]->forward(busy_input[0]);
                                started = true;
                                while (!release) std::this_thread::yield();
                              },
                              [] {}},
                             {devices[0], devices[0]});  // shared device: both queued on the worker
  });
  while (!started) std::this_thread::yield();
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    release = true;
  });
  parallel::parallel_apply(modules, inputs);
  releaser.join();
  other.join();
  EXPECT_EQ(thread_of(modules[0]), thread_of(busy[0]));
  EXPECT_NE(thread_of(modules[0]), std::this_thread::get_id());
}

TEST_P(ParallelApply, ReplicasOnOneDeviceShareItsWorker) {
  const auto devices = this->devices();
  const auto modules = probes(3);
  const std::vector<Device> same(3, devices.back());
  const std::vector<Tensor> outputs = parallel::parallel_apply(modules, inputs_on(same));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(thread_of(modules[i]), thread_of(modules[0]));
    expect_values(outputs[i], {2.0, 2.0 * static_cast<double>(i)}, {1, 2});
  }
}

TEST_P(ParallelApply, WorkersInheritTheCallersGradMode) {
  const auto devices = this->devices();
  const auto modules = probes(devices.size());
  std::vector<Tensor> inputs = inputs_on(devices);
  for (Tensor& input : inputs) input.set_requires_grad();
  {
    NoGradGuard no_grad;
    const auto outputs = parallel::parallel_apply(modules, inputs);
    for (size_t i = 0; i < modules.size(); ++i) {
      EXPECT_FALSE(std::static_pointer_cast<Probe>(modules[i])->grad_mode);
      EXPECT_FALSE(outputs[i].requires_grad());
    }
  }
  const auto outputs = parallel::parallel_apply(modules, inputs);
  for (size_t i = 0; i < modules.size(); ++i) {
    EXPECT_TRUE(std::static_pointer_cast<Probe>(modules[i])->grad_mode);
    EXPECT_TRUE(outputs[i].requires_grad());
  }
}

TEST_P(ParallelApply, WorkersTakeTheCallersAutocastStateAndGiveTheirOwnBack) {
  const auto devices = this->devices();
  std::vector<std::optional<Precision>> seen(devices.size(), Precision::TF32);
  std::vector<std::function<void()>> tasks;
  for (size_t i = 0; i < devices.size(); ++i) tasks.push_back([&seen, i] { seen[i] = autocast_precision(); });
  {
    AutocastGuard autocast(DType::BFloat16);
    parallel::run_on_devices(tasks, devices);
    for (size_t i = 0; i < devices.size(); ++i) EXPECT_EQ(seen[i], Precision::BFloat16) << "task " << i;
  }
  parallel::run_on_devices(tasks, devices);  // the same workers, now outside the scope
  for (size_t i = 0; i < devices.size(); ++i) EXPECT_EQ(seen[i], std::nullopt) << "task " << i;
}

TEST_P(ParallelApply, AFailingReplicaIsRethrownNamingReplicaAndDeviceAndTheNextCallWorks) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  const long master_references = net->fc1->weight.impl_ptr().use_count();
  {
    std::vector<std::shared_ptr<nn::Module>> replicas = parallel::replicate(std::shared_ptr<nn::Module>(net), devices);
    auto probe = std::make_shared<Probe>();
    replicas.back() = probe;  // the last replica fails on a negative input
    std::vector<Tensor> inputs;
    for (size_t d = 0; d + 1 < devices.size(); ++d) inputs.push_back(seeded_randn({2, 4}, devices[d], 70 + d));
    inputs.push_back(Tensor::full({1, 2}, -1.0f, devices.back()));
    const size_t last = devices.size() - 1;
    EXPECT_ERROR(parallel::parallel_apply(replicas, inputs), "in replica " + std::to_string(last) + " on device " +
                                                                 devices.back().str() + ": Probe: negative input");
    probe->throw_std = true;
    EXPECT_ERROR(parallel::parallel_apply(replicas, inputs),
                 "in replica " + std::to_string(last) + " on device " + devices.back().str() + ": negative input");
  }
  // The failed calls left no graph behind that keeps the master alive ...
  EXPECT_EQ(net->fc1->weight.impl_ptr().use_count(), master_references);
  // ... and the pool still works.
  const auto outputs = parallel::parallel_apply(probes(devices.size()), inputs_on(devices));
  expect_values(outputs.back(), {2.0, 2.0 * static_cast<double>(devices.size() - 1)}, {1, 2});
}

TEST_P(ParallelApply, TheLowestFailingReplicaIsReported) {
  const auto devices = this->devices();
  EXPECT_ERROR(parallel::parallel_apply(probes(devices.size()), inputs_on(devices, -1.0f)),
               "in replica 0 on device " + devices[0].str() + ": Probe: negative input");
}

// Runs `body` on a new thread and waits for it; an exception fails the test instead of terminating.
void on_another_thread(const std::function<void()>& body) {
  std::thread caller([&] {
    try {
      body();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "thread threw: " << e.what();
    }
  });
  caller.join();
}

TEST_P(ParallelApply, SameReplicasFromTwoThreadsOneAfterAnother) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  const auto replicas = parallel::replicate(std::shared_ptr<nn::Module>(net), devices);
  std::vector<Tensor> inputs;
  for (size_t d = 0; d < devices.size(); ++d) inputs.push_back(seeded_randn({2, 4}, devices[d], 80 + d));
  std::vector<Tensor> first;
  std::vector<Tensor> second;
  on_another_thread([&] {
    first = parallel::parallel_apply(replicas, inputs);
    std::vector<Tensor> losses;
    for (const Tensor& output : first) losses.push_back(sum(output));
    autograd::backward(losses);
  });
  on_another_thread([&] {
    NoGradGuard no_grad;  // evaluate the same replicas again, without recording
    second = parallel::parallel_apply(replicas, inputs);
  });
  ASSERT_EQ(second.size(), devices.size());
  for (size_t d = 0; d < devices.size(); ++d) expect_close(second[d], first[d], 0.0, 0.0);
  auto reference = make_net(devices[0]);
  for (size_t d = 0; d < devices.size(); ++d) sum(reference->forward(inputs[d].to(devices[0]))).backward();
  expect_gradients_close(*net, gradients_of(*reference));
}

TEST_P(ParallelApply, PersistentReplicasTrainFromTwoThreadsOneAfterAnother) {
  const auto devices = this->devices();
  parallel::ReplicatedModule model(make_net(devices[0]), devices);
  std::vector<Tensor> inputs;
  for (size_t d = 0; d < devices.size(); ++d) inputs.push_back(seeded_randn({2, 4}, devices[d], 85 + d));
  auto reference = make_net(devices[0]);
  for (size_t d = 0; d < devices.size(); ++d) sum(reference->forward(inputs[d].to(devices[0]))).backward();
  for (int round = 0; round < 2; ++round) {
    on_another_thread([&] {
      model.zero_grad();
      std::vector<Tensor> losses;
      for (const Tensor& output : model.forward_replicas(inputs)) losses.push_back(sum(output));
      autograd::backward(losses);
      model.reduce_gradients();
    });
    for (size_t d = 0; d < model.size(); ++d) expect_gradients_close(*model.replicas()[d], gradients_of(*reference));
  }
}

TEST_P(ParallelApply, ConcurrentCallsFromSeveralThreadsFinish) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  std::vector<Tensor> inputs;
  for (size_t d = 0; d < devices.size(); ++d) inputs.push_back(seeded_randn({3, 4}, devices[d], 90 + d));
  std::vector<Tensor> expected;
  for (const Tensor& input : inputs) expected.push_back(net->forward(input.to(devices[0])));

  std::atomic<int> mismatches{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int round = 0; round < 10; ++round) {
        NoGradGuard no_grad;
        const auto outputs = parallel::parallel_apply(parallel::replicate(net, devices), inputs);
        for (size_t d = 0; d < devices.size(); ++d)
          if (!allclose(outputs[d], expected[d])) ++mismatches;
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// A replica that itself runs parallel_apply (on the pool's own worker thread).
class Nested : public nn::Cloneable<Nested> {
 public:
  explicit Nested(std::vector<Device> devices) : devices(std::move(devices)) {}
  Tensor forward(const Tensor& x) override {
    const auto outputs = parallel::parallel_apply(probes(devices.size()), inputs_on(devices), devices);
    return x + outputs.back().to(x.device());
  }
  std::vector<Device> devices;
};

TEST_P(ParallelApply, ANestedCallFromInsideAReplicaRunsInline) {
  const auto devices = this->devices();
  const std::vector<std::shared_ptr<nn::Module>> modules{std::make_shared<Nested>(devices)};
  const auto outputs = parallel::parallel_apply(modules, {Tensor::zeros({1, 2}, devices[1])});
  expect_values(outputs[0], {2.0, 2.0 * static_cast<double>(devices.size() - 1)}, {1, 2});
}

TEST_P(ParallelApply, DocumentedErrors) {
  const auto devices = this->devices();
  EXPECT_ERROR(parallel::parallel_apply(probes(2), inputs_on({devices[0], devices[1], devices[0]})),
               "parallel::parallel_apply: got 2 replicas but 3 inputs");
  EXPECT_ERROR(parallel::parallel_apply(probes(2), inputs_on({devices[0], devices[1]}), {devices[0]}),
               "got 1 devices for 2 replicas");
  EXPECT_ERROR(parallel::parallel_apply({nullptr}, {Tensor::zeros({1}, devices[0])}), "replica 0 is null");
  EXPECT_ERROR(parallel::parallel_apply(probes(1), {Tensor()}), "input 0 is undefined");
  EXPECT_ERROR(parallel::run_on_devices({[] {}}, devices), "parallel::run_on_devices: got 1 tasks for");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(ParallelApply);

TEST(RunOnDevices, RunsEveryTaskBeforeReturningAndKeepsOrderOnOneDevice) {
  std::mutex mutex;
  std::vector<int> order;
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 6; ++i) {
    tasks.emplace_back([&, i] {
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back(i);
    });
  }
  parallel::run_on_devices(tasks, std::vector<Device>(6, Device::cpu(5)));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace tandem::testing

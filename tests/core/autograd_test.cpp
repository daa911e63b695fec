// Graph recording, accumulation, grad mode, custom Functions, graphs that span devices.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;

class AutogradTest : public testing::EveryDevice {};

TEST_P(AutogradTest, LeavesAccumulateAcrossBackwardCalls) {
  Tensor x = Tensor::from_vector({1, 2, 3}, {3}, device()).set_requires_grad();
  EXPECT_TRUE(x.is_leaf());
  Tensor y = sum(x * x);
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(y.requires_grad());
  ASSERT_NE(y.grad_fn(), nullptr);
  y.backward();
  expect_values(x.grad(), {2, 4, 6}, {3});
  const void* storage = x.grad().data_ptr();
  sum(x * 3.0f).backward();
  expect_values(x.grad(), {5, 7, 9}, {3});
  EXPECT_EQ(x.grad().data_ptr(), storage) << "accumulation must happen in place";
}

TEST_P(AutogradTest, GradientsThatMeetAreSummed) {
  Tensor x = Tensor::from_vector({2}, {1}, device()).set_requires_grad();
  Tensor a = x * 3.0f;
  Tensor b = x * x;
  (a + b + a * b).backward(Tensor::ones({1}, device()));
  // d/dx (3x + x^2 + 3x^3) = 3 + 2x + 9x^2 = 43 at x = 2
  expect_values(x.grad(), {43}, {1});
}

TEST_P(AutogradTest, NoGradGuardStopsRecording) {
  Tensor x = Tensor::ones({2}, device()).set_requires_grad();
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(GradMode::is_enabled());
    Tensor y = x * 2.0f;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_TRUE((x * 2.0f).requires_grad());
}

TEST_P(AutogradTest, GradModeIsPerThread) {
  NoGradGuard no_grad;
  bool enabled_in_other_thread = false;
  std::thread([&] { enabled_in_other_thread = GradMode::is_enabled(); }).join();
  EXPECT_TRUE(enabled_in_other_thread);
  EXPECT_FALSE(GradMode::is_enabled());
}

TEST_P(AutogradTest, DetachCutsTheGraph) {
  Tensor x = Tensor::ones({2}, device()).set_requires_grad();
  Tensor d = (x * 2.0f).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  expect_values(d, {2, 2}, {2});
}

TEST_P(AutogradTest, Errors) {
  Tensor x = Tensor::ones({2}, device()).set_requires_grad();
  EXPECT_ERROR(Tensor::ones({2}, device()).backward(), "does not require grad");
  EXPECT_ERROR((x * 2.0f).backward(),
               "Tensor::backward: a gradient can be created implicitly only for one-element "
               "tensors, but the tensor has shape [2]; pass a gradient");
  EXPECT_ERROR((x * 2.0f).backward(Tensor::ones({3}, device())),
               "Tensor::backward: the gradient for the tensor has shape [3] but expected [2]");
  EXPECT_ERROR((x * 2.0f).set_requires_grad(), "only leaves can be set");
  Tensor y = sum(x * x);
  y.backward();
  EXPECT_ERROR(y.backward(), "backward: mul's saved tensors were freed by an earlier backward");

  Tensor v = Tensor::ones({2}, device()).set_requires_grad();
  const Tensor z = v * 2.0f;
  EXPECT_ERROR(autograd::backward({z, sum(z)}, {Tensor::ones({2}, device())}),
               "autograd::backward: got 1 gradients for 2 roots (expected none or one per root)");
  EXPECT_ERROR(autograd::backward({sum(z), z}),
               "autograd::backward: a gradient can be created implicitly only for "
               "one-element tensors, but root 1 has shape [2]");
  EXPECT_ERROR(autograd::backward({z}, {Tensor::ones({1}, device())}),
               "autograd::backward: the gradient for root 0 has shape [1] but expected [2]");
  EXPECT_ERROR(autograd::backward({sum(z), Tensor()}), "autograd::backward: root 1 is undefined");
  EXPECT_ERROR(autograd::backward({Tensor::ones({1}, device())}),
               "autograd::backward: root 0 does not require grad and has no grad_fn");
  EXPECT_FALSE(v.grad().defined()) << "each of these backward calls must be refused before running";
}

// loss = sum(x w) for x = [[1, 2], [3, 4]], w = [[1], [2]]: d/dx = ones w^T = [[1, 2], [1, 2]], d/dw = x^T ones =
// the column sums of x, [[4], [6]]. MatmulBackward saves x and w.
struct MatmulGraph {
  Tensor x, w, loss;
  explicit MatmulGraph(Device device)
      : x(Tensor::from_vector({1, 2, 3, 4}, {2, 2}, device).set_requires_grad()),
        w(Tensor::from_vector({1, 2}, {2, 1}, device).set_requires_grad()),
        loss(sum(matmul(x, w))) {}
};

TEST_P(AutogradTest, SecondBackwardThroughFreedSavedTensorsIsRefusedNamingTheNode) {
  MatmulGraph g(device());
  g.loss.backward();
  expect_values(g.w.grad(), {4, 6}, {2, 1});
  const std::string refused =
      "backward: MatmulBackward's saved tensors were freed by an earlier backward; pass "
      "retain_graph=true to the first backward to run it twice";
  EXPECT_ERROR(g.loss.backward(), refused);
  EXPECT_ERROR(autograd::backward({g.loss}), refused);
  // Refused before anything reached the leaves.
  expect_values(g.w.grad(), {4, 6}, {2, 1});
  expect_values(g.x.grad(), {1, 2, 1, 2}, {2, 2});
}

TEST_P(AutogradTest, RetainGraphLetsTheGraphRunAgainAndAccumulates) {
  MatmulGraph g(device());
  g.loss.backward({}, /*retain_graph=*/true);
  g.loss.backward();  // uses, then frees, the retained tensors
  expect_values(g.w.grad(), {8, 12}, {2, 1}, 0.0, 0.0);
  expect_values(g.x.grad(), {2, 4, 2, 4}, {2, 2}, 0.0, 0.0);
  EXPECT_ERROR(g.loss.backward(), "backward: MatmulBackward's saved tensors were freed");
  expect_values(g.w.grad(), {8, 12}, {2, 1}, 0.0, 0.0);

  // The same through autograd::backward, with an explicit gradient of 0.5 on a second root y = x w ([2, 1]).
  MatmulGraph h(device());
  const Tensor y = matmul(h.x, h.w);
  const std::vector<Tensor> half{Tensor(), Tensor::full({2, 1}, 0.5f, device())};
  autograd::backward({h.loss, y}, half, /*retain_graph=*/true);
  autograd::backward({h.loss, y}, half, /*retain_graph=*/true);
  autograd::backward({h.loss, y}, half);
  // Each pass: d/dw = (1 + 0.5) [[4], [6]], d/dx = (1 + 0.5) [[1, 2], [1, 2]].
  expect_values(h.w.grad(), {18, 27}, {2, 1}, 0.0, 0.0);
  expect_values(h.x.grad(), {4.5, 9, 4.5, 9}, {2, 2}, 0.0, 0.0);
  EXPECT_ERROR(autograd::backward({y}, {half[1]}), "backward: MatmulBackward's saved tensors were freed");
}

TEST_P(AutogradTest, NodesThatSavedNoTensorsRunInEveryBackward) {
  // Additions, subtractions, scaling, a view and sums: none saves a tensor. loss = sum(narrow(2 (x + y) - x, 1..2)):
  // d/dx = [0, 1, 1], d/dy = [0, 2, 2].
  Tensor x = Tensor::from_vector({1, 2, 3}, {3}, device()).set_requires_grad();
  Tensor y = Tensor::from_vector({4, 5, 6}, {3}, device()).set_requires_grad();
  const Tensor loss = sum(((x + y) * 2.0f - x).narrow(0, 1, 2));
  loss.backward();
  loss.backward();
  expect_values(x.grad(), {0, 2, 2}, {3}, 0.0, 0.0);
  expect_values(y.grad(), {0, 4, 4}, {3}, 0.0, 0.0);
  autograd::backward({loss});
  expect_values(x.grad(), {0, 3, 3}, {3}, 0.0, 0.0);
  expect_values(y.grad(), {0, 6, 6}, {3}, 0.0, 0.0);
}

TEST_P(AutogradTest, GradientsFlowThroughDeviceCopies) {
  // cpu:0 -> (this device) -> cpu:1: the graph spans three devices; each gradient lands on its leaf's device.
  Tensor x = Tensor::from_vector({1, 2}, {2}, Device::cpu(0)).set_requires_grad();
  Tensor w = Tensor::from_vector({3, 4}, {2}, device()).set_requires_grad();
  Tensor y = x.to(device()) * w;
  Tensor loss = sum(y.to(Device::cpu(1)) * y.to(Device::cpu(1)));
  loss.backward();
  EXPECT_EQ(x.grad().device(), Device::cpu(0));
  EXPECT_EQ(w.grad().device(), device());
  // loss = sum (x w)^2: dx = 2 x w^2, dw = 2 w x^2
  expect_values(x.grad(), {18, 64}, {2});
  expect_values(w.grad(), {6, 32}, {2});
}

// y = x^3 written by a user, with its own backward.
struct Cube : autograd::Function {
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    save_for_backward({in[0]});
    return {in[0] * in[0] * in[0]};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& x = saved_tensors()[0];
    return {grads[0] * x * x * 3.0f};
  }
  std::string name() const override { return "Cube"; }
  const std::vector<Tensor>& saved() const { return saved_tensors(); }
};

TEST_P(AutogradTest, CustomFunction) {
  Tensor x = Tensor::from_vector({1, -2, 0.5f}, {3}, device()).set_requires_grad();
  Tensor y = autograd::apply(std::make_shared<Cube>(), {x})[0];
  EXPECT_EQ(y.grad_fn()->name(), "Cube");
  expect_values(y, {1, -8, 0.125}, {3});
  testing::gradcheck([](auto& in) { return autograd::apply(std::make_shared<Cube>(), in)[0]; }, {x});
}

TEST_P(AutogradTest, CustomFunctionSavedTensorsAreFreedAfterBackward) {
  Tensor x = Tensor::from_vector({1, -2}, {2}, device()).set_requires_grad();
  const auto cube = std::make_shared<Cube>();
  const Tensor y = sum(autograd::apply(cube, {x})[0]);
  ASSERT_EQ(cube->saved().size(), 1u);
  EXPECT_TRUE(cube->saved()[0].is_same(x));
  y.backward({}, /*retain_graph=*/true);
  EXPECT_EQ(cube->saved().size(), 1u) << "retain_graph keeps the saved tensors";
  y.backward();
  expect_values(x.grad(), {6, 24}, {2}, 0.0, 0.0);  // twice 3 x^2
  EXPECT_ERROR(cube->saved(),
               "autograd::Function::saved_tensors: Cube's saved tensors were freed by an earlier "
               "backward");
  EXPECT_ERROR(y.backward(), "backward: Cube's saved tensors were freed");

  // A Function that saves no tensor (its state is a constant) runs again.
  struct Triple : autograd::Function {
    float factor = 3.0f;
    std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0] * factor}; }
    std::vector<Tensor> backward(const std::vector<Tensor>& grads) override { return {grads[0] * factor}; }
  };
  Tensor z = Tensor::from_vector({1, 2}, {2}, device()).set_requires_grad();
  const Tensor t = sum(autograd::apply(std::make_shared<Triple>(), {z})[0]);
  t.backward();
  t.backward();
  expect_values(z.grad(), {6, 6}, {2}, 0.0, 0.0);
}

struct WrongShape : autograd::Function {
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0] * 2.0f}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {Tensor::ones({5}, grads[0].device())};
  }
  std::string name() const override { return "WrongShape"; }
};

TEST_P(AutogradTest, CustomFunctionMistakesAreReported) {
  Tensor x = Tensor::ones({3}, device()).set_requires_grad();
  Tensor y = autograd::apply(std::make_shared<WrongShape>(), {x})[0];
  EXPECT_ERROR(sum(y).backward(), "WrongShape::backward returned a gradient of shape [5] for input 0 of shape [3]");
}

TEST_P(AutogradTest, OutputThatIsAnInputKeepsTheInputIntact) {
  struct Identity : autograd::Function {
    std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0]}; }
    std::vector<Tensor> backward(const std::vector<Tensor>& grads) override { return {grads[0] * 5.0f}; }
  };
  Tensor x = Tensor::ones({2}, device()).set_requires_grad();
  Tensor y = autograd::apply(std::make_shared<Identity>(), {x})[0];
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(y.shares_storage_with(x));
  sum(y).backward();
  expect_values(x.grad(), {5, 5}, {2});
}

TEST_P(AutogradTest, BackwardPassesOnSeveralThreadsRunASharedNodeOneAtATime) {
  // An identity whose backward lingers and counts how many threads are inside it at once.
  struct Linger : autograd::Function {
    std::atomic<int> inside{0};
    std::atomic<int> most_inside{0};
    std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0].clone()}; }
    std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
      const int now = ++inside;
      most_inside = std::max(most_inside.load(), now);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      --inside;
      return {grads[0]};
    }
  };
  Tensor x = Tensor::zeros({2}, device()).set_requires_grad();
  const auto linger = std::make_shared<Linger>();
  const Tensor y = autograd::apply(linger, {x})[0];
  const Tensor once = sum(y), twice = sum(y * 2.0f), thrice = sum(y * 3.0f);
  std::vector<std::thread> threads;
  for (const Tensor* loss : {&once, &twice, &thrice}) threads.emplace_back([loss] { loss->backward(); });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(linger->most_inside.load(), 1);
  expect_values(x.grad(), {6, 6}, {2}, 0.0, 0.0);  // the shared leaf's accumulator, too, ran one pass at a time
}

TEST_P(AutogradTest, PostAccumulateGradHooksRunAfterEachAccumulation) {
  Tensor x = Tensor::from_vector({1, 2}, {2}, device()).set_requires_grad();
  std::vector<std::vector<float>> seen;  // x.grad() as the first hook saw it, call by call
  std::vector<int> calls;                // which hook ran, in order
  const uint64_t first = x.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    EXPECT_TRUE(leaf.is_same(x));
    seen.push_back(leaf.grad().to_vector());
    calls.push_back(1);
  });
  x.register_post_accumulate_grad_hook([&](const Tensor&) { calls.push_back(2); });
  sum(x * x).backward();     // d/dx = 2x = {2, 4}
  sum(x * 3.0f).backward();  // accumulated: {5, 7}
  EXPECT_EQ(seen, (std::vector<std::vector<float>>{{2, 4}, {5, 7}}));
  EXPECT_EQ(calls, (std::vector<int>{1, 2, 1, 2}));

  // Gradients that meet are summed before they reach the leaf: one accumulation, one call per hook.
  sum(x * x + x).backward();
  EXPECT_EQ(calls.size(), 6u);
  EXPECT_EQ(seen.back(), (std::vector<float>{8, 12}));  // {5, 7} + 2x + 1

  x.remove_post_accumulate_grad_hook(first);
  x.remove_post_accumulate_grad_hook(first);  // already removed: nothing happens
  sum(x).backward();
  EXPECT_EQ(calls, (std::vector<int>{1, 2, 1, 2, 1, 2, 2}));
  EXPECT_EQ(seen.size(), 3u);

  Tensor w = Tensor::ones({2}, device()).set_requires_grad();
  w.register_post_accumulate_grad_hook([](const Tensor&) { TANDEM_FAIL("hook: refused"); });
  EXPECT_ERROR(sum(w * 2.0f).backward(), "hook: refused");
  expect_values(w.grad(), {2, 2}, {2});  // the hook runs after the accumulation

  const auto nothing = [](const Tensor&) {};
  EXPECT_ERROR((x * 2.0f).register_post_accumulate_grad_hook(nothing),
               "Tensor::register_post_accumulate_grad_hook: the tensor is the result of an operation but expected a "
               "leaf that requires grad");
  EXPECT_ERROR(Tensor::ones({2}, device()).register_post_accumulate_grad_hook(nothing),
               "the tensor is a leaf that does not require grad");
  EXPECT_ERROR(Tensor().register_post_accumulate_grad_hook(nothing), "register_post_accumulate_grad_hook");
}

// queue_callback: after the whole graph has run (every leaf's gradient final), before backward returns, in order;
// a callback may queue more.
TEST_P(AutogradTest, QueuedCallbacksRunOnceTheWholePassHasRun) {
  Tensor x = Tensor::from_vector({1, 2}, {2}, device()).set_requires_grad();
  Tensor w = Tensor::from_vector({3}, {1}, device()).set_requires_grad();
  std::vector<std::string> events;
  bool queued = false;
  x.register_post_accumulate_grad_hook([&](const Tensor&) {
    events.push_back("x");
    EXPECT_TRUE(autograd::backward_running());
    if (queued) return;
    queued = true;
    autograd::queue_callback([&] {
      events.push_back("first: x.grad " + std::to_string(x.grad().to_vector()[1]) + ", w.grad " +
                       std::to_string(w.grad().to_vector()[0]));
      autograd::queue_callback([&] { events.push_back("queued by the first"); });
    });
    autograd::queue_callback([&] { events.push_back("second"); });
  });
  w.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("w"); });
  sum(x * w * 2.0f).backward();  // the callbacks see both leaves' gradients, whichever came first
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(std::set<std::string>(events.begin(), events.begin() + 2), (std::set<std::string>{"x", "w"}));
  EXPECT_EQ(events[2], "first: x.grad 6.000000, w.grad 6.000000");
  EXPECT_EQ(events[3], "second");
  EXPECT_EQ(events[4], "queued by the first");
  EXPECT_FALSE(autograd::backward_running());
  events.clear();
  sum(x * w).backward();  // callbacks belong to one pass: none is left for the next
  EXPECT_EQ(events.size(), 2u);

  EXPECT_ERROR(autograd::queue_callback([] {}), "autograd::queue_callback: no backward pass is running on this thread");
  Tensor y = Tensor::ones({1}, device()).set_requires_grad();
  y.register_post_accumulate_grad_hook(
      [](const Tensor&) { autograd::queue_callback([] { TANDEM_FAIL("callback: no"); }); });
  EXPECT_ERROR(sum(y * 2.0f).backward(), "callback: no");
  EXPECT_FALSE(autograd::backward_running());
}

// Note [Gradient checks]: one check per leaf, run by check_grad (as optimizers do), removed by an empty function.
TEST_P(AutogradTest, GradientChecksRefuseGradientsTheirOwnerHasNotMadeReady) {
  Tensor x = Tensor::ones({2}, device()).set_requires_grad();
  bool ready = false;
  x.set_grad_check([&](const std::string& user) { TANDEM_CHECK(ready, user, ": x is not ready"); });
  EXPECT_TRUE(x.has_grad_check());
  EXPECT_ERROR(x.check_grad("optim::SGD::step"), "optim::SGD::step: x is not ready");
  EXPECT_ERROR(x.set_grad_check([](const std::string&) {}),
               "Tensor::set_grad_check: the tensor's gradient is checked already");
  ready = true;
  x.check_grad("optim::SGD::step");
  x.set_grad_check(nullptr);
  EXPECT_FALSE(x.has_grad_check());
  ready = false;
  x.check_grad("anyone");  // removed
  EXPECT_ERROR((x * 2.0f).set_grad_check([](const std::string&) {}), "the tensor is the result of an operation");
  EXPECT_ERROR(Tensor().set_grad_check([](const std::string&) {}), "set_grad_check");
  Tensor().check_grad("anyone");  // an undefined tensor has no check
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(AutogradTest);

}  // namespace
}  // namespace tandem

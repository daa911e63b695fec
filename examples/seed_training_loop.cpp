// seed_training_loop: the data-parallel training step written out by hand, checked against one device.
//
// Net = Linear(10, 20) -> Linear(20, 1), trained with SGD (momentum) on a synthetic regression batch per step.
// Each step scatters input and target over the devices, replicates the net, runs the replicas with
// parallel_apply, computes each replica's mean squared error weighted by its share of the rows, and backpropagates
// all of them in one pass, so that the replicas' gradients are summed (comm::reduce_add_coalesced) onto the master
// parameters on the first device; then SGD steps. The same steps are run on the first device alone, and the
// largest difference between the two nets' parameters is printed at the end.
//
//   seed_training_loop [--devices cuda:0,cuda:1 | cpu:0,cpu:1,cpu:2 | all] [--steps 12] [--batch 64]
//                      [--lr 0.02] [--momentum 0.5]

#include <cmath>

#include "example_cli.h"

namespace {

using tandem::Device;
using tandem::Tensor;
namespace comm = tandem::comm;
namespace nn = tandem::nn;
namespace parallel = tandem::parallel;

class Net : public nn::Cloneable<Net> {
 public:
  explicit Net(Device device)
      : fc1(std::make_shared<nn::Linear>(10, 20, true, device)),
        fc2(std::make_shared<nn::Linear>(20, 1, true, device)) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(fc1->forward(x)); }
  std::shared_ptr<nn::Linear> fc1;
  std::shared_ptr<nn::Linear> fc2;
};

struct Options {
  int steps = 12;
  int64_t batch = 64;
  double lr = 0.02;
  double momentum = 0.5;
};

// Step `step`'s batch: x ~ N(0, 1), y = sum of x's columns weighted 1, -1, 1, ... plus noise; the same on every run.
struct Batch {
  Tensor x;
  Tensor y;
};
Batch make_batch(int step, int64_t rows, Device device) {
  tandem::manual_seed(1000 + static_cast<uint64_t>(step));
  Tensor x = Tensor::randn({rows, 10}, device);
  std::vector<float> weights(10);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = i % 2 == 0 ? 1.0f : -1.0f;
  Tensor y = tandem::matmul(x, Tensor::from_vector(weights, {10, 1}, device)) + Tensor::randn({rows, 1}, device) * 0.1f;
  return {x, y};
}

// One data-parallel step; returns the loss of the whole batch (the sum of the weighted per-replica losses).
float data_parallel_step(const std::shared_ptr<Net>& net, tandem::optim::SGD& sgd, const Batch& batch,
                         const std::vector<Device>& devices) {
  const std::vector<Tensor> inputs = parallel::scatter(batch.x, devices);
  // A batch with fewer rows than devices has fewer chunks: only the first inputs.size() devices take part.
  const std::vector<Device> used(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(inputs.size()));
  const std::vector<Tensor> targets = comm::scatter(batch.y, used);
  const auto replicas = parallel::replicate(net, used);
  const std::vector<Tensor> outputs = parallel::parallel_apply(replicas, inputs);
  std::vector<Tensor> losses;
  float total = 0.0f;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const float share = static_cast<float>(inputs[i].size(0)) / static_cast<float>(batch.x.size(0));
    losses.push_back(nn::mse_loss(outputs[i], targets[i]) * share);
    total += losses.back().item();
  }
  sgd.zero_grad();
  tandem::autograd::backward(losses);  // one pass: the replicate's Broadcast node sums every replica's gradient
  sgd.step();
  return total;
}

void train(const std::vector<Device>& devices, const Options& options) {
  tandem::manual_seed(0);
  auto net = std::make_shared<Net>(devices[0]);
  tandem::manual_seed(0);
  auto single = std::make_shared<Net>(devices[0]);
  const tandem::optim::SGDOptions sgd_options{.lr = options.lr, .momentum = options.momentum};
  tandem::optim::SGD sgd(net->parameters(), sgd_options);
  tandem::optim::SGD single_sgd(single->parameters(), sgd_options);

  std::cout << "training " << *net << "\non " << tandem::to_string(devices) << ", batch " << options.batch
            << ", SGD lr " << options.lr << " momentum " << options.momentum << "\n";
  for (int step = 0; step < options.steps; ++step) {
    const Batch batch = make_batch(step, options.batch, devices[0]);
    const float loss = data_parallel_step(net, sgd, batch, devices);

    single_sgd.zero_grad();
    Tensor single_loss = nn::mse_loss(single->forward(batch.x), batch.y);
    single_loss.backward();
    single_sgd.step();
    std::printf("step %2d  loss %.6f  (one device: %.6f)\n", step + 1, static_cast<double>(loss),
                static_cast<double>(single_loss.item()));
  }

  double largest = 0.0;
  double largest_relative = 0.0;
  const auto parameters = net->named_parameters();
  const auto reference = single->named_parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    const double difference = tandem::max_abs_diff(parameters[i].second, reference[i].second);
    const std::vector<float> values = reference[i].second.to_vector();
    double scale = 0.0;
    for (float v : values) scale = std::max(scale, std::abs(static_cast<double>(v)));
    largest = std::max(largest, difference);
    largest_relative = std::max(largest_relative, difference / std::max(scale, 1e-12));
  }
  std::printf("largest parameter difference from one device: %.3g (%.3g relative to the largest parameter)\n",
              largest, largest_relative);
  TANDEM_CHECK(largest_relative <= 1e-5, "seed_training_loop: the data-parallel parameters differ from the "
               "single-device ones by ", largest_relative, " (relative) but expected at most 1e-5");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Data-parallel SGD written out step by step (scatter, replicate, parallel_apply, backward, step), "
               "compared with the same steps on one device.",
               "seed_training_loop");
  Options options;
  app.add_option("--steps", options.steps, "SGD steps")->capture_default_str()->check(CLI::Range(1, 1000000));
  app.add_option("--batch", options.batch, "Rows per step (split over the devices)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--lr", options.lr, "Learning rate")->capture_default_str()->check(CLI::Range(1e-6, 10.0));
  app.add_option("--momentum", options.momentum, "SGD momentum")->capture_default_str()->check(CLI::Range(0.0, 0.999));
  return tandem::examples::run_example(app, argc, argv,
                                       [&](const std::vector<Device>& devices) { train(devices, options); });
}

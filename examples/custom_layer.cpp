// custom_layer: two layers written by a user, checked with autograd::gradcheck, then trained data-parallel.
//
// ScaledTanh computes y = scale * tanh(gain * x) per feature, with its forward and backward written by hand as an
// autograd::Function. RMSNorm computes y = x / sqrt(mean(x^2) + eps) * weight over each row's features, written in
// tandem's ops only, so autograd derives its backward. Before training, gradcheck compares both layers' gradients
// (for the input and every parameter) with finite differences. Deriving a layer from nn::Cloneable<Self> (the one
// extra line) is all that replicate, DataParallel, to(), parameters() and save/load need. The model Linear(4, 16) ->
// RMSNorm(16) -> ScaledTanh(16) -> Linear(16, 1) learns y = sin(x0) + x1 * x2 - x3 with DataParallel and SGD; the
// loss is printed as it goes, then the learned gains.
//
//   custom_layer [--devices cuda:0,cuda:1 | cpu:0,cpu:1,cpu:2 | all] [--steps 200] [--batch 96]

#include <algorithm>
#include <cmath>

#include "example_cli.h"

namespace {

using tandem::Device;
using tandem::Tensor;
namespace autograd = tandem::autograd;
namespace nn = tandem::nn;

// y = scale * tanh(gain * x), with the gradients written out by hand:
//   dy/dx = scale * gain * (1 - t^2),  dy/dscale = t,  dy/dgain = scale * x * (1 - t^2),  where t = tanh(gain * x).
class ScaledTanhFunction : public autograd::Function {
 public:
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    const Tensor& x = inputs[0];
    const Tensor& scale = inputs[1];
    const Tensor& gain = inputs[2];
    const Tensor t = tandem::tanh(x * gain);
    save_for_backward({x, scale, gain, t});  // freed after backward
    return {t * scale};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    const Tensor& x = saved_tensors()[0];
    const Tensor& scale = saved_tensors()[1];
    const Tensor& gain = saved_tensors()[2];
    const Tensor& t = saved_tensors()[3];
    const Tensor slope = g * scale * (Tensor::ones(t.shape(), t.device()) - t * t);
    return {needs_input_grad(0) ? slope * gain : Tensor(),  // the input batch usually needs none
            tandem::sum(g * t, 0), tandem::sum(slope * x, 0)};
  }
  std::string name() const override { return "ScaledTanhFunction"; }
};

class ScaledTanh : public nn::Cloneable<ScaledTanh> {  // Cloneable<Self>: the one line that makes it replicable
 public:
  ScaledTanh(int64_t features, Device device)
      : scale(Tensor::ones({features}, device)), gain(Tensor::uniform({features}, 0.5f, 1.5f, device)) {
    register_parameter("scale", scale);
    register_parameter("gain", gain);
  }
  Tensor forward(const Tensor& x) override {
    return autograd::apply(std::make_shared<ScaledTanhFunction>(), {x, scale, gain})[0];
  }
  std::string extra_repr() const override { return "features=" + std::to_string(scale.size(0)); }

  Tensor scale;
  Tensor gain;
};

// y = x * rsqrt(mean(x^2 over the last dimension) + eps) * weight, in tandem's ops: autograd differentiates it.
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  return x * tandem::rsqrt(tandem::mean(x * x, {-1}, /*keepdim=*/true) + eps) * weight;
}

class RMSNorm : public nn::Cloneable<RMSNorm> {
 public:
  RMSNorm(int64_t features, Device device, float eps = 1e-6f) : weight(Tensor::ones({features}, device)), eps(eps) {
    register_parameter("weight", weight);
  }
  Tensor forward(const Tensor& x) override { return rms_norm(x, weight, eps); }
  std::string extra_repr() const override { return "features=" + std::to_string(weight.size(0)); }

  Tensor weight;
  float eps;
};

class Model : public nn::Cloneable<Model> {
 public:
  explicit Model(Device device)
      : fc1(std::make_shared<nn::Linear>(4, 16, true, device)),
        norm(std::make_shared<RMSNorm>(16, device)),
        act(std::make_shared<ScaledTanh>(16, device)),
        fc2(std::make_shared<nn::Linear>(16, 1, true, device)) {
    register_module("fc1", fc1);
    register_module("norm", norm);
    register_module("act", act);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(act->forward(norm->forward(fc1->forward(x)))); }

  std::shared_ptr<nn::Linear> fc1;
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<ScaledTanh> act;
  std::shared_ptr<nn::Linear> fc2;
};

// Checks both layers' gradients against finite differences on `device` (gradcheck throws an Error naming the worst
// element when one is out of tolerance), for the input and every parameter, and prints the largest errors.
void check_gradients(Device device) {
  const auto leaf = [device](const Tensor& values) { return values.to(device).set_requires_grad(); };
  const Tensor x = leaf(Tensor::uniform({6, 5}, -1.0f, 1.0f));
  const Tensor scale = leaf(Tensor::uniform({5}, 0.5f, 1.5f));
  const Tensor gain = leaf(Tensor::uniform({5}, 0.5f, 1.5f));
  const Tensor weight = leaf(Tensor::uniform({5}, 0.5f, 1.5f));
  const auto largest_error = [](const autograd::GradcheckReport& report) {
    double largest = 0.0;
    for (const autograd::GradcheckInputReport& input : report.inputs) largest = std::max(largest, input.max_abs_error);
    return largest;
  };
  const autograd::GradcheckReport scaled_tanh = autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return autograd::apply(std::make_shared<ScaledTanhFunction>(), {in[0], in[1], in[2]})[0];
      },
      {x, scale, gain});
  const autograd::GradcheckReport rms =
      autograd::gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-6f); }, {x, weight});
  std::printf("gradcheck on %s: ScaledTanh (hand-written backward) largest error %.2g, RMSNorm (tandem ops) %.2g\n",
              device.str().c_str(), largest_error(scaled_tanh), largest_error(rms));
}

// x ~ U(-1, 1), y = sin(x0) + x1 * x2 - x3.
void make_batch(int64_t rows, Device device, Tensor& x, Tensor& y) {
  x = Tensor::uniform({rows, 4}, -1.0f, 1.0f, Device::cpu());
  const std::vector<float> v = x.to_vector();
  std::vector<float> targets(static_cast<size_t>(rows));
  for (size_t r = 0; r < targets.size(); ++r) {
    const float* row = &v[4 * r];
    targets[r] = std::sin(row[0]) + row[1] * row[2] - row[3];
  }
  x = x.to(device);
  y = Tensor::from_vector(targets, {rows, 1}, device);
}

void train(const std::vector<Device>& devices, int steps, int64_t batch) {
  tandem::manual_seed(0);
  check_gradients(devices[0]);
  auto model = std::make_shared<Model>(devices[0]);
  auto data_parallel = std::make_shared<tandem::parallel::DataParallel>(model, devices);
  tandem::optim::SGD sgd(data_parallel->parameters(), {.lr = 0.05, .momentum = 0.9});
  std::cout << *data_parallel << "\n";

  Tensor x, y;
  make_batch(512, devices[0], x, y);  // held-out rows
  auto held_out_mse = [&] {
    tandem::NoGradGuard no_grad;
    return static_cast<double>(nn::mse_loss((*data_parallel)(x), y).item());
  };
  const double initial = held_out_mse();
  for (int step = 1; step <= steps; ++step) {
    Tensor bx, by;
    make_batch(batch, devices[0], bx, by);
    sgd.zero_grad();
    Tensor loss = nn::mse_loss((*data_parallel)(bx), by);
    loss.backward();
    sgd.step();
    if (step == 1 || step % std::max(1, steps / 10) == 0)
      std::printf("step %4d  batch loss %.5f\n", step, static_cast<double>(loss.item()));
  }
  const double final_loss = held_out_mse();
  std::printf("held-out MSE: %.5f before training, %.5f after\n", initial, final_loss);
  std::cout << "learned gains of the custom layer: " << tandem::examples::format_values(model->act->gain) << "\n";
  TANDEM_CHECK(final_loss < initial, "custom_layer: training did not lower the held-out MSE (", initial, " -> ",
               final_loss, ")");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "User-defined layers, one with a custom backward (autograd::Function) and one in tandem's ops, checked "
      "with gradcheck and trained with DataParallel.",
      "custom_layer");
  int steps = 200;
  int64_t batch = 96;
  app.add_option("--steps", steps, "SGD steps")->capture_default_str()->check(CLI::Range(1, 1000000));
  app.add_option("--batch", batch, "Rows per step (split over the devices)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  return tandem::examples::run_example(app, argc, argv,
                                       [&](const std::vector<Device>& devices) { train(devices, steps, batch); });
}

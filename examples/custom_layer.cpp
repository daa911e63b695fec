// custom_layer: a layer written by a user, with its own parameters and a hand-written backward, trained
// data-parallel.
//
// ScaledTanh computes y = scale * tanh(gain * x) per feature. Its forward and backward are an autograd::Function;
// deriving the layer from nn::Cloneable<ScaledTanh> (the one extra line) is all that replicate, DataParallel,
// to(), parameters() and save/load need. The model Linear(4, 16) -> ScaledTanh(16) -> Linear(16, 1) learns
// y = sin(x0) + x1 * x2 - x3 with DataParallel and SGD; the loss is printed as it goes, then the learned gains.
//
//   custom_layer [--devices cuda:0,cuda:1 | cpu:0,cpu:1,cpu:2 | all] [--steps 200] [--batch 96]

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

class Model : public nn::Cloneable<Model> {
 public:
  explicit Model(Device device)
      : fc1(std::make_shared<nn::Linear>(4, 16, true, device)),
        act(std::make_shared<ScaledTanh>(16, device)),
        fc2(std::make_shared<nn::Linear>(16, 1, true, device)) {
    register_module("fc1", fc1);
    register_module("act", act);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(act->forward(fc1->forward(x))); }

  std::shared_ptr<nn::Linear> fc1;
  std::shared_ptr<ScaledTanh> act;
  std::shared_ptr<nn::Linear> fc2;
};

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
  CLI::App app("A user-defined layer with a custom backward (autograd::Function), trained with DataParallel.",
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

// The training script shown in README.md, kept here so that every build compiles it: a user-defined net trained
// with parallel::data_parallel on default_devices(), then saved to net.safetensors.
#include <tandem/tandem.h>

using namespace tandem;

struct Net : nn::Cloneable<Net> {  // deriving from Cloneable<Self> is all replicate() needs
  Net() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return (*fc2)((*fc1)(x)); }
  std::shared_ptr<nn::Linear> fc1 = std::make_shared<nn::Linear>(10, 20);
  std::shared_ptr<nn::Linear> fc2 = std::make_shared<nn::Linear>(20, 1);
};

int main() {
  manual_seed(0);
  std::vector<Device> devices = default_devices();        // every GPU, else cpu:0 and cpu:1
  auto net = std::make_shared<Net>();
  net->to(devices[0]);
  optim::SGD sgd(net->parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = Tensor::randn({64, 10}, devices[0]), y = Tensor::randn({64, 1}, devices[0]);
  for (int step = 0; step < 100; ++step) {
    sgd.zero_grad();
    Tensor out = parallel::data_parallel(net, x, devices);  // scatter, replicate, parallel_apply, gather
    Tensor loss = nn::mse_loss(out, y);
    loss.backward();                                        // replica gradients are summed on devices[0]
    sgd.step();
  }
  save(*net, "net.safetensors");                            // opens in PyTorch's safetensors too
}

// Trains y = 2x + 1 with one Linear layer through the installed headers and library; exits 1 unless it learns it.
#include <tandem/tandem.h>

#include <cmath>
#include <iostream>

int main() {
  using namespace tandem;
  manual_seed(0);
  auto model = std::make_shared<nn::Linear>(1, 1);
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  Tensor x = Tensor::from_vector({-1, 0, 1, 2}, {4, 1});
  Tensor y = Tensor::from_vector({-1, 1, 3, 5}, {4, 1});
  for (int step = 0; step < 200; ++step) {
    sgd.zero_grad();
    nn::mse_loss((*model)(x), y).backward();
    sgd.step();
  }
  const float w = model->weight.item(), b = model->bias.item();
  std::cout << "learned y = " << w << " x + " << b << "\n";
  return std::abs(w - 2) < 1e-3 && std::abs(b - 1) < 1e-3 ? 0 : 1;
}

// The LibTorch side of train_step_bench: one training step (forward, MSE, backward, SGD with momentum) on one GPU
// and with torch::nn::parallel::data_parallel over two, for the same workloads and sizes:
//   seed  Linear(10, 20) -> Linear(20, 1), global batch 4096
//   wide  4 x Linear(4096, 4096) with ReLU between, global batch 8192, float32
// Method as train_step_bench: inputs and targets on cuda:0, every GPU synchronized before and after each step, host
// wall clock, median over the timed steps after a warm-up.

#include <torch/nn/parallel/data_parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

// data_parallel replicates the module with clone(), so the nets derive from Cloneable and build their layers in
// reset().
struct NetImpl : torch::nn::Cloneable<NetImpl> {
  NetImpl(int64_t inputs, int64_t width, int64_t outputs, int64_t layers, bool relu)
      : inputs(inputs), width(width), outputs(outputs), layers(layers), relu(relu) {
    reset();
  }
  void reset() override {
    linears.clear();
    for (int64_t i = 0; i < layers; ++i) {
      const int64_t in = i == 0 ? inputs : width;
      const int64_t out = i + 1 == layers ? outputs : width;
      linears.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(in, out)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (size_t i = 0; i < linears.size(); ++i) {
      x = linears[i]->forward(x);
      if (relu && i + 1 < linears.size()) x = torch::relu(x);
    }
    return x;
  }
  int64_t inputs, width, outputs, layers;
  bool relu;  // between the layers
  std::vector<torch::nn::Linear> linears;
};
TORCH_MODULE(Net);

struct Workload {
  std::string name;
  std::function<Net()> make;
  int64_t batch, inputs, outputs;
  int warmup, steps;
};

void synchronize(int gpus) {
  for (int gpu = 0; gpu < gpus; ++gpu) torch::cuda::synchronize(gpu);
}

double time_step(const Workload& workload, int gpus) {
  torch::manual_seed(0);
  Net model = workload.make();
  model->to(torch::Device(torch::kCUDA, 0));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(1e-4).momentum(0.9));
  const auto options = torch::TensorOptions().device(torch::kCUDA, 0);
  const torch::Tensor x = torch::randn({workload.batch, workload.inputs}, options);
  const torch::Tensor y = torch::randn({workload.batch, workload.outputs}, options);
  std::vector<torch::Device> devices;
  for (int gpu = 0; gpu < gpus; ++gpu) devices.emplace_back(torch::kCUDA, gpu);

  auto step = [&] {
    optimizer.zero_grad();
    torch::Tensor output = gpus > 1 ? torch::nn::parallel::data_parallel(model, x, devices, devices.front())
                                    : model->forward(x);
    torch::mse_loss(output, y).backward();
    optimizer.step();
  };
  for (int i = 0; i < workload.warmup; ++i) step();
  std::vector<double> times;
  for (int i = 0; i < workload.steps; ++i) {
    synchronize(gpus);
    const auto begin = std::chrono::steady_clock::now();
    step();
    synchronize(gpus);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

int main() {
  const int gpus = std::min<int>(2, static_cast<int>(torch::cuda::device_count()));
  if (gpus < 1) {
    std::printf("libtorch_step: no GPU visible; nothing to measure\n");
    return 0;
  }
  const std::vector<Workload> workloads = {
      {"seed net, batch 4096", [] { return Net(10, 20, 1, 2, false); }, 4096, 10, 1, 50, 500},
      {"wide MLP, batch 8192", [] { return Net(4096, 4096, 4096, 4, true); }, 8192, 4096, 4096, 5, 30},
  };
  std::printf("LibTorch, milliseconds per training step (median)\n\n");
  std::printf("| workload | LibTorch 1 GPU | LibTorch data_parallel (%d GPUs) |\n|---|---|---|\n", gpus);
  for (const Workload& workload : workloads) {
    const double one = time_step(workload, 1);
    const double many = gpus > 1 ? time_step(workload, gpus) : 0.0;
    std::printf("| %s | %.3f | %.3f |\n", workload.name.c_str(), one, many);
    std::fflush(stdout);
  }
  return 0;
}

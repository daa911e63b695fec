// comm_tour: the communication functions, one step at a time, on a small two-layer model.
//
// The model is copied onto every device, run forward on each, and the outputs are summed onto the first device
// with comm::reduce_add. The sum is broadcast back to every device with comm::broadcast, and the copies are
// gathered onto the first device with comm::gather. Each step prints what it did and its result.
//
//   comm_tour [--devices cuda:0,cuda:1 | cpu:0,cpu:1,cpu:2 | all]

#include "example_cli.h"

namespace {

using tandem::Device;
using tandem::Tensor;
using tandem::examples::format_values;
namespace comm = tandem::comm;
namespace nn = tandem::nn;

void tour(const std::vector<Device>& devices) {
  tandem::NoGradGuard no_grad;  // comm results are not recorded by autograd anyway; this is inference only
  tandem::manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 4, true, devices[0]), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(4, 2, true, devices[0])});
  const Tensor input = Tensor::randn({2, 3}, devices[0]);
  std::cout << "model on " << devices[0] << ":\n" << *model << "\n";
  std::cout << "input " << tandem::to_string(input.shape()) << " on " << input.device() << ": "
            << format_values(input) << "\n\n";

  std::cout << "1. comm::broadcast sends the input to every device (on " << devices[0]
            << " it is the input itself, no copy); each device runs its own copy of the model:\n";
  const std::vector<Tensor> inputs = comm::broadcast(input, devices);
  std::vector<Tensor> outputs;
  for (size_t d = 0; d < devices.size(); ++d) {
    const std::shared_ptr<nn::Module> copy = model->clone(devices[d]);
    outputs.push_back(copy->forward(inputs[d]));
    std::cout << "   output on " << outputs[d].device() << ": " << format_values(outputs[d]) << "\n";
  }

  const Tensor sum = comm::reduce_add(outputs, devices[0]);
  std::cout << "\n2. comm::reduce_add sums the " << outputs.size() << " outputs onto " << sum.device()
            << " (every output is the same, so the sum is " << outputs.size() << " times one of them):\n   "
            << format_values(sum) << "\n";

  const std::vector<Tensor> copies = comm::broadcast(sum, devices);
  std::cout << "\n3. comm::broadcast sends the sum back to every device:\n";
  for (const Tensor& copy : copies) {
    std::cout << "   on " << copy.device() << ": " << format_values(copy)
              << (copy.shares_storage_with(sum) ? "  (the sum itself, no copy)" : "  (a new copy)") << "\n";
  }

  const Tensor gathered = comm::gather(copies, 0, devices[0]);
  std::cout << "\n4. comm::gather concatenates the " << copies.size() << " copies along dim 0 onto "
            << gathered.device() << ", shape " << tandem::to_string(gathered.shape()) << ":\n   "
            << format_values(gathered) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("A tour of tandem::comm: forward on every device, reduce_add, broadcast, gather.", "comm_tour");
  return tandem::examples::run_example(app, argc, argv, tour, /*min_devices=*/2);
}

// cnn_bench: times one training step of a CNN on one device through parallel::TrainingStep: forward,
// cross-entropy, backward and an optimizer step (SGD with momentum, and Adam), eagerly (TrainingStepOptions::capture
// false) and captured as one CUDA graph (its default options), and prints a markdown table of milliseconds per step.
// benchmarks/torch_cnn_bench.py times the same step in PyTorch (eager and torch.compile), to be run in the same
// session: a reference figure is always measured beside tandem's, never typed in.
//   --model digits (the default)
//            Conv2d(1, 32, 3, padding 1), ReLU, Conv2d(32, 64, 3, padding 1), ReLU, MaxPool2d(2), flatten,
//            Linear(1024, 128), ReLU, Linear(128, 10); batch 1024 of 1 x 8 x 8 float32 images, 10 classes
//   --model resnet18
//            trainers::make_resnet18 (BasicBlocks 64-128-256-512, BatchNorm2d, the CIFAR stem), batch 512 of
//            3 x 32 x 32 images, 10 classes, in bf16 mixed precision (Module::set_precision(BFloat16): bfloat16 products,
//            float32 parameters, normalization, loss and optimizer)
//   targets  the labels one-hot as float32 class probabilities (the same loss as class indices), which the loss reads
//            on the device: class-index targets are checked on the host (Note [Class targets] in
//            nn/src/loss_class.cpp), which a captured step cannot do
// Method: the batch starts on the device. Two figures per step, each the median over the timed samples after a
// warm-up: "synchronized" (the device synchronized before and after each step: the step's latency) and "in a loop"
// (back-to-back steps between synchronizations, divided by their number: a training loop's rate). A captured step
// that falls back to the eager one says so in its cell and the reason on stderr.
//
//   cnn_bench [--model digits|resnet18] [--device cuda|cpu] [--steps N] [--markdown PATH]
// --device cpu (eager only) and a few --steps check the program where there is no GPU.

#include <tandem/tandem.h>

#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "bench_support.h"

namespace {

namespace bench = tandem::bench;
using tandem::Tensor;

constexpr int64_t kClasses = 10;
constexpr int kLoop = 10;  // steps per sample in a loop

struct Options {
  std::string model = "digits";
  std::string device = "cuda";
  int steps = 50;  // timed samples of one synchronized step; a tenth as many (at least 1) of a loop
  std::string markdown;
};

Options parse(int argc, char** argv) {
  Options options;
  const char* usage = "usage: cnn_bench [--model digits|resnet18] [--device cuda|cpu] [--steps N] [--markdown PATH]";
  const bench::Flag model{"--model", [&options](std::string_view text) {
                            TANDEM_CHECK(text == "digits" || text == "resnet18", "--model is ", tandem::excerpt(text),
                                         " but expected digits or resnet18");
                            options.model = text;
                          }};
  const bench::Flag device{"--device", [&options](std::string_view text) {
                             TANDEM_CHECK(text == "cuda" || text == "cpu", "--device is ", tandem::excerpt(text),
                                          " but expected cuda or cpu");
                             options.device = text;
                           }};
  bench::parse_flags(
      argc, argv, "cnn_bench", usage,
      {model, device, bench::int_flag("--steps", options.steps, 1, 100000),
       bench::text_flag("--markdown", options.markdown)});
  return options;
}

// [N, C, H, W] -> [N, C * H * W].
class FlattenImages : public tandem::nn::Cloneable<FlattenImages> {
 public:
  Tensor forward(const Tensor& input) override { return input.reshape({input.size(0), -1}); }
};

// The network of --model with its input shape.
struct Network {
  tandem::Shape images;  // [batch, C, H, W]
  std::shared_ptr<tandem::nn::Module> module;
};

Network digits_cnn() {
  using namespace tandem::nn;
  return {{1024, 1, 8, 8}, std::make_shared<Sequential>(
      std::make_shared<Conv2d>(1, 32, 3, Conv2dOptions{.padding = 1}), std::make_shared<ReLU>(),
      std::make_shared<Conv2d>(32, 64, 3, Conv2dOptions{.padding = 1}), std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(2), std::make_shared<FlattenImages>(), std::make_shared<Linear>(1024, 128),
      std::make_shared<ReLU>(), std::make_shared<Linear>(128, kClasses))};
}

Network resnet18() {
  std::shared_ptr<tandem::trainers::ResNet> net = tandem::trainers::make_resnet18({.classes = kClasses});
  net->set_precision(tandem::Precision::BFloat16);
  return {{512, 3, 32, 32}, net};
}

Network network(const Options& options) { return options.model == "resnet18" ? resnet18() : digits_cnn(); }

std::string title(const Options& options) {
  return options.model == "resnet18" ? "ResNet-18, batch 512 of 3 x 32 x 32, bf16" : "digits CNN, batch 1024 of 1 x 8 x 8";
}

Tensor probability_cross_entropy(const Tensor& logits, const Tensor& probabilities) {
  return tandem::nn::cross_entropy(logits, probabilities);
}

struct Timing {
  bool adam = false;
  bool captured = false;
  bool loop = false;
};

// Median milliseconds of one step, and (captured only) why the step was not captured ("" when it was).
std::pair<double, std::string> time_step(const tandem::Device& device, const Options& options, const Timing& timing) {
  using namespace tandem;
  manual_seed(0);
  const Network net = network(options);
  const std::shared_ptr<nn::Module>& model = net.module;
  model->to(device);
  parallel::ReplicatedModule replica(model, {device});
  std::unique_ptr<parallel::ReplicatedOptimizer> optimizer;
  if (timing.adam) {
    optimizer = std::make_unique<parallel::ReplicatedAdam>(replica, optim::AdamOptions{.lr = 1e-3});
  } else {
    optimizer = std::make_unique<parallel::ReplicatedSGD>(replica, optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  }
  parallel::TrainingStep step(replica, *optimizer, probability_cross_entropy, {.capture = timing.captured});
  const int64_t batch = net.images[0];
  const Tensor images = Tensor::randn(net.images, device);
  const Tensor labels = one_hot(Tensor::randint(0, kClasses, {batch}), kClasses).to(DType::Float32).to(device);
  const bench::Sampling sampling =
      timing.loop ? bench::Sampling{.warmup = 10, .samples = std::max(1, options.steps / 10), .iterations = kLoop}
                  : bench::Sampling{.warmup = 10, .samples = options.steps};
  const double ms =
      bench::median_ms_per_call({device}, sampling, [&] { step.step({.features = images, .targets = labels}); });
  return {ms, timing.captured && !step.captured() ? step.fallback_reason() : std::string()};
}

int run(const Options& options) {
  const std::optional<tandem::Device> chosen = bench::flag_device(options.device, "cnn_bench");
  if (!chosen) return 0;
  if (!options.markdown.empty()) tandem::check_writable(options.markdown, "--markdown");
  const tandem::Device device = *chosen;
  const bool cuda = device.is_cuda();
  std::ostringstream table;
  table << "| optimizer | step | eager | captured |\n|---|---|---|---|\n";
  for (const bool adam : {false, true}) {
    for (const bool loop : {false, true}) {
      table << "| " << (adam ? "Adam" : "SGD, momentum 0.9") << " | "
            << (loop ? "in a loop of " + std::to_string(kLoop) : std::string("synchronized")) << " | "
            << bench::ms_cell(time_step(device, options, {.adam = adam, .loop = loop}).first) << " | ";
      if (!cuda) {
        table << "- |\n";  // capture needs a CUDA device
        continue;
      }
      const auto [ms, fallback] = time_step(device, options, {.adam = adam, .captured = true, .loop = loop});
      table << bench::ms_cell(ms) << (fallback.empty() ? "" : " (ran eagerly)") << " |\n";
      if (!fallback.empty()) std::cerr << "captured step ran eagerly: " << fallback << "\n";
    }
  }
  std::cout << "tandem: " << title(options) << ", milliseconds per training step on " << device
            << " (median; parallel::TrainingStep)\n\n"
            << table.str();
  if (!options.markdown.empty()) tandem::write_file_atomically(options.markdown, table.str(), "--markdown");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::exit_status("cnn_bench", [&] { return run(parse(argc, argv)); });
}

// linear_bench: times one Linear(4096, 4096) layer at batch 4096, forward and backward, on one GPU, in its plain
// form and its fused form (fused_linear() in tandem/core/matmul_settings.h: cuBLASLt bias and bias-gradient
// epilogues, the weight gradient written straight into .grad), and fused with a ReLU that follows it (linear_relu:
// the ReLU in the forward product's epilogue), in each precision (Note [Precision modes] in
// tandem/core/precision.h: FP32, TF32, and BF16 mixed precision with float32 weights and gradients), and prints a
// markdown table. The layer is one of the wide MLP's inner layers: its input needs a gradient too, and the weight's
// and bias's .grad exist before backward (as the views into a data-parallel module's flat gradient buffer do), so
// backward accumulates into them.
// Method: after 3 warm-up iterations, each sample is 10 iterations (forward, then backward seeded with a fixed
// gradient) between cudaDeviceSynchronize calls, timed by the host clock; the median of 15 samples is reported,
// per iteration. The input's .grad is cleared before each iteration, so that no pass adds into it.
//
//   linear_bench [--device N] [--markdown PATH]

#include <tandem/tandem.h>

#include <iostream>
#include <sstream>
#include <string>

#include "bench_support.h"

namespace {

namespace bench = tandem::bench;

constexpr int64_t kBatch = 4096;
constexpr int64_t kFeatures = 4096;
constexpr int kWarmup = 3;
constexpr int kIterationsPerSample = 10;
constexpr int kSamples = 15;

struct Options {
  int device = 0;
  std::string markdown;
};

Options parse(int argc, char** argv) {
  Options options;
  bench::parse_flags(
      argc, argv, "linear_bench", "usage: linear_bench [--device N] [--markdown PATH]",
      {bench::int_flag("--device", options.device, 0, 1023), bench::text_flag("--markdown", options.markdown)});
  return options;
}

#if TANDEM_WITH_CUDA

// The forms of the layer that are timed.
enum class Form { Plain, Fused, FusedRelu };

const char* form_name(Form form) {
  switch (form) {
    case Form::Plain: return "plain";
    case Form::Fused: return "fused";
    case Form::FusedRelu: return "fused + ReLU";
  }
  return "?";
}

// Median milliseconds of one forward and backward of the layer on `device`, in the given form and precision.
double time_linear(tandem::Device device, Form form, tandem::Precision precision) {
  using namespace tandem;
  set_fused_linear(form != Form::Plain);
  manual_seed(0);
  const float bound = 1.0f / 64.0f;  // torch.nn.Linear's 1 / sqrt(in_features)
  Tensor w = Tensor::uniform({kFeatures, kFeatures}, -bound, bound, device).set_requires_grad();
  Tensor b = Tensor::uniform({kFeatures}, -bound, bound, device).set_requires_grad();
  w.set_grad(Tensor::zeros({kFeatures, kFeatures}, device));
  b.set_grad(Tensor::zeros({kFeatures}, device));
  Tensor x = Tensor::randn({kBatch, kFeatures}, device).set_requires_grad();
  const Tensor seed = Tensor::randn({kBatch, kFeatures}, device);
  const auto iteration = [&] {
    x.set_grad(Tensor());
    const Tensor y = form == Form::FusedRelu ? linear_relu(x, w, b, precision) : linear(x, w, b, precision);
    y.backward(seed);
  };

  return bench::median_ms_per_call(
      {device}, {.warmup = kWarmup, .samples = kSamples, .iterations = kIterationsPerSample}, iteration);
}

int run(const Options& options) {
  if (tandem::cuda_device_count() < 1) {
    std::cout << "linear_bench: no GPU visible; nothing to measure\n";
    return 0;
  }
  TANDEM_CHECK(options.device >= 0 && options.device < tandem::cuda_device_count(), "linear_bench: --device is ",
               options.device, " but expected 0 to ", tandem::cuda_device_count() - 1);
  if (!options.markdown.empty()) tandem::check_writable(options.markdown, "--markdown");
  const tandem::Device device = tandem::Device::cuda(options.device);
  // Three products of 2 * batch * in * out operations each: the output, the input's and the weight's gradients.
  const double flops = 3.0 * 2.0 * kBatch * kFeatures * kFeatures;
  std::ostringstream table;
  table << "| precision | form | ms per forward + backward | TFLOP/s | plain / this |\n|---|---|---|---|---|\n";
  for (const tandem::Precision precision :
       {tandem::Precision::Float32, tandem::Precision::TF32, tandem::Precision::BFloat16}) {
    const double plain = time_linear(device, Form::Plain, precision);
    for (const Form form : {Form::Plain, Form::Fused, Form::FusedRelu}) {
      const double ms = form == Form::Plain ? plain : time_linear(device, form, precision);
      const std::string ratio = form == Form::Plain ? "" : bench::formatted("%.3f", plain / ms);
      table << bench::formatted("| %s | %s | %.3f | %.1f | %s |\n", tandem::precision_name(precision),
                                form_name(form), ms, flops / ms / 1e9, ratio.c_str());
    }
    std::cerr << "measured " << tandem::precision_name(precision) << "\n";
  }
  tandem::set_fused_linear(true);
  std::cout << "Linear(" << kFeatures << ", " << kFeatures << ") at batch " << kBatch << " on " << device
            << ", forward and backward (median of " << kSamples << " samples)\n\n"
            << table.str();
  if (!options.markdown.empty()) tandem::write_file_atomically(options.markdown, table.str(), "--markdown");
  return 0;
}

#else

int run(const Options&) {
  std::cout << "linear_bench: tandem was built without CUDA; nothing to measure\n";
  return 0;
}

#endif

}  // namespace

int main(int argc, char** argv) {
  return bench::exit_status("linear_bench", [&] { return run(parse(argc, argv)); });
}

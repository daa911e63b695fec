// linear_bench: times one Linear(4096, 4096) layer at batch 4096, forward and backward, on one GPU, in its plain
// form and its fused form (fused_linear() in tandem/core/matmul_settings.h: cuBLASLt bias and bias-gradient
// epilogues, the weight gradient written straight into .grad), in plain FP32 and with TF32, and prints a markdown
// table. The layer is one of the wide MLP's inner layers: its input needs a gradient too, and the weight's and
// bias's .grad exist before backward (as the views into a data-parallel module's flat gradient buffer do), so
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

// Median milliseconds of one forward and backward of the layer on `device`, in the given form and precision.
double time_linear(tandem::Device device, bool fused, bool tf32) {
  using namespace tandem;
  set_fused_linear(fused);
  set_allow_tf32(tf32);
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
    linear(x, w, b).backward(seed);
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
  table << "| precision | form | ms per forward + backward | TFLOP/s | plain / fused |\n|---|---|---|---|---|\n";
  for (const bool tf32 : {false, true}) {
    const double plain = time_linear(device, false, tf32);
    const double fused = time_linear(device, true, tf32);
    const char* precision = tf32 ? "TF32" : "FP32";
    table << bench::formatted("| %s | plain | %.3f | %.1f | |\n", precision, plain, flops / plain / 1e9)
          << bench::formatted("| %s | fused | %.3f | %.1f | %.3f |\n", precision, fused, flops / fused / 1e9,
                              plain / fused);
    std::cerr << "measured " << precision << "\n";
  }
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

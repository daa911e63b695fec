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

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#if TANDEM_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace {

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
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--device" && i + 1 < argc) {
      options.device = std::stoi(argv[++i]);
    } else if (flag == "--markdown" && i + 1 < argc) {
      options.markdown = argv[++i];
    } else {
      std::cerr << "usage: linear_bench [--device N] [--markdown PATH]\n";
      std::exit(flag == "--help" || flag == "-h" ? 0 : 2);
    }
  }
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

  for (int i = 0; i < kWarmup; ++i) iteration();
  std::vector<double> samples;
  for (int s = 0; s < kSamples; ++s) {
    cudaDeviceSynchronize();
    const auto begin = std::chrono::steady_clock::now();
    for (int i = 0; i < kIterationsPerSample; ++i) iteration();
    cudaDeviceSynchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    samples.push_back(ms / kIterationsPerSample);
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

std::string format(const char* pattern, double value) {
  char text[32];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
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
  cudaSetDevice(options.device);
  // Three products of 2 * batch * in * out operations each: the output, the input's and the weight's gradients.
  const double flops = 3.0 * 2.0 * kBatch * kFeatures * kFeatures;
  std::ostringstream table;
  table << "| precision | form | ms per forward + backward | TFLOP/s | plain / fused |\n|---|---|---|---|---|\n";
  for (const bool tf32 : {false, true}) {
    const double plain = time_linear(device, false, tf32);
    const double fused = time_linear(device, true, tf32);
    const char* precision = tf32 ? "TF32" : "FP32";
    table << "| " << precision << " | plain | " << format("%.3f", plain) << " | " << format("%.1f", flops / plain / 1e9)
          << " | |\n";
    table << "| " << precision << " | fused | " << format("%.3f", fused) << " | " << format("%.1f", flops / fused / 1e9)
          << " | " << format("%.3f", plain / fused) << " |\n";
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
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "linear_bench: " << e.what() << "\n";
    return 1;
  }
}

// attention_bench: times fused_attention (Note [Fused attention] in core/src/cuda/attention.h) against the reference
// path of nn::scaled_dot_product_attention (composed products and softmax, the scores stored), forward alone and
// forward + backward, on one GPU, for q, k, v [B, H, L, D] of bfloat16 tensors (bf16 products) and of float32
// tensors (fp32 products), and prints a markdown table with TFLOP/s. FLOPs count the four products of the forward
// (4 B H L S D, halved when causal) and 2.5 times that for forward + backward (FlashAttention's convention), so the
// numbers compare with benchmarks/torch_attention_bench.py, which times PyTorch's SDPA on the same shapes.
// Method: after 3 warm-up calls, each sample is 10 calls between device synchronizations timed by the host clock;
// the median of 10 samples is reported, per call.
//
//   attention_bench [--device N] [--markdown PATH]

#include <tandem/tandem.h>

#include <cmath>
#include <iostream>
#include <sstream>
#include <string>

#include "bench_support.h"

namespace {

namespace bench = tandem::bench;
using tandem::DType;
using tandem::Precision;
using tandem::Tensor;

constexpr int kWarmup = 3;
constexpr int kIterationsPerSample = 10;
constexpr int kSamples = 10;

struct Options {
  int device = 0;
  std::string markdown;
};

Options parse(int argc, char** argv) {
  Options options;
  bench::parse_flags(argc, argv, "attention_bench", "attention_bench [--device N] [--markdown PATH]",
                     {bench::int_flag("--device", options.device, 0, 1023),
                      bench::text_flag("--markdown", options.markdown)});
  return options;
}

struct Shape {
  int64_t b, h, l, d;
  bool causal;
};

#ifdef TANDEM_WITH_CUDA

// ms per call of forward (and backward, with a fixed cotangent) of the fused op or the reference path.
double time_attention(const tandem::Device& device, const Shape& s, bool bfloat16, bool fused, bool backward) {
  tandem::set_fused_attention_enabled(fused);
  const DType dtype = bfloat16 ? DType::BFloat16 : DType::Float32;
  const tandem::Shape shape{s.b, s.h, s.l, s.d};
  // Leaves of the benchmark's dtype; the reference path takes float32 only, so it runs on float32 leaves.
  const DType leaf_dtype = fused ? dtype : DType::Float32;
  const Tensor q = Tensor::randn(shape, device).to(leaf_dtype).set_requires_grad(backward);
  const Tensor k = Tensor::randn(shape, device).to(leaf_dtype).set_requires_grad(backward);
  const Tensor v = Tensor::randn(shape, device).to(leaf_dtype).set_requires_grad(backward);
  const Tensor w = Tensor::randn(shape, device).to(leaf_dtype);
  const Precision precision = bfloat16 ? Precision::BFloat16 : Precision::Float32;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  const auto iteration = [&] {
    if (!backward) {
      tandem::NoGradGuard no_grad;
      fused ? tandem::fused_attention(q, k, v, scale, s.causal, precision)
            : tandem::nn::scaled_dot_product_attention(q, k, v, {}, 0.0, s.causal, scale);
      return;
    }
    for (const Tensor& t : {q, k, v}) t.set_grad(Tensor());
    const Tensor out = fused ? tandem::fused_attention(q, k, v, scale, s.causal, precision)
                             : tandem::nn::scaled_dot_product_attention(q, k, v, {}, 0.0, s.causal, scale);
    out.backward(w);
  };
  const double ms = bench::median_ms_per_call(
      {device}, {.warmup = kWarmup, .samples = kSamples, .iterations = kIterationsPerSample}, iteration);
  tandem::set_fused_attention_enabled(true);
  return ms;
}

int run(const Options& options) {
  if (tandem::cuda_device_count() < 1) {
    std::cout << "attention_bench: no GPU visible; nothing to measure\n";
    return 0;
  }
  TANDEM_CHECK(options.device >= 0 && options.device < tandem::cuda_device_count(), "attention_bench: --device is ",
               options.device, " but expected 0 to ", tandem::cuda_device_count() - 1);
  if (!options.markdown.empty()) tandem::check_writable(options.markdown, "--markdown");
  const tandem::Device device = tandem::Device::cuda(options.device);
  const Shape shapes[] = {{16, 12, 1024, 64, true}, {16, 12, 1024, 64, false}, {8, 16, 2048, 128, true},
                          {32, 8, 512, 32, true}, {4, 12, 4096, 64, true}};
  std::ostringstream table;
  table << "| B x H x L x D | causal | dtype | path | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |\n"
        << "|---|---|---|---|---|---|---|---|\n";
  std::cout << "Attention on " << device << " (median of " << kSamples << " samples of " << kIterationsPerSample
            << " calls; the reference path multiplies float32 leaves in the precision named)\n\n"
            << table.str() << std::flush;
  for (const Shape& s : shapes) {
    const double flops = 4.0 * s.b * s.h * s.l * s.l * s.d / (s.causal ? 2.0 : 1.0);
    for (const bool bfloat16 : {true, false}) {
      for (const bool fused : {true, false}) {
        const double forward = time_attention(device, s, bfloat16, fused, false);
        const double both = time_attention(device, s, bfloat16, fused, true);
        const std::string row = bench::formatted("| %lld x %lld x %lld x %lld | %s | %s | %s | %.3f | %.1f | %.3f | %.1f |\n",
                                  static_cast<long long>(s.b), static_cast<long long>(s.h),
                                  static_cast<long long>(s.l), static_cast<long long>(s.d), s.causal ? "yes" : "no",
                                  bfloat16 ? "bf16" : "fp32", fused ? "fused" : "reference", forward,
                                  flops / forward / 1e9, both, 3.5 * flops / both / 1e9);
        table << row;
        std::cout << row << std::flush;  // row by row, so that a run cut short still shows what it measured
      }
    }
    std::cerr << "measured " << s.b << " x " << s.h << " x " << s.l << " x " << s.d << "\n";
  }
  if (!options.markdown.empty()) tandem::write_file_atomically(options.markdown, table.str(), "--markdown");
  return 0;
}

#else

int run(const Options&) {
  std::cout << "attention_bench: tandem was built without CUDA; nothing to measure\n";
  return 0;
}

#endif

}  // namespace

int main(int argc, char** argv) {
  return bench::exit_status("attention_bench", [&] { return run(parse(argc, argv)); });
}

"""Times torch.nn.functional.scaled_dot_product_attention on the shapes of attention_bench.cpp, forward alone and
forward + backward, in bfloat16 and float32 tensors, on one GPU, and prints a markdown table in attention_bench's
columns (FLOPs: 4 B H L S D for the forward, halved when causal; 3.5 times that for forward + backward).

Method: CUDA events around 10 calls after 3 warm-up calls; the median of 10 samples, per call. PyTorch picks its
SDPA backend itself (FlashAttention-2 for these shapes on an H200); --backend flash|efficient|math forces one.

    python3 benchmarks/torch_attention_bench.py [--backend flash]
"""
import argparse
import statistics
import sys

SHAPES = [(16, 12, 1024, 64, True), (16, 12, 1024, 64, False), (8, 16, 2048, 128, True), (32, 8, 512, 32, True),
          (4, 12, 4096, 64, True)]
WARMUP, ITERATIONS, SAMPLES = 3, 10, 10


def median_ms(call):
    import torch
    for _ in range(WARMUP):
        call()
    samples = []
    for _ in range(SAMPLES):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(ITERATIONS):
            call()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / ITERATIONS)
    return statistics.median(samples)


def time_sdpa(shape, dtype, backward):
    import torch
    import torch.nn.functional as F
    b, h, l, d, causal = shape
    q, k, v = (torch.randn(b, h, l, d, device="cuda", dtype=dtype, requires_grad=backward) for _ in range(3))
    w = torch.randn(b, h, l, d, device="cuda", dtype=dtype)

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def both():
        for t in (q, k, v):
            t.grad = None
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(w)

    return median_ms(both if backward else forward)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["flash", "efficient", "math"], default=None)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_attention_bench: torch is not installed; nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("torch_attention_bench: no GPU visible; nothing to measure")
        return 0
    import contextlib
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "math": SDPBackend.MATH}
    context = sdpa_kernel(backends[args.backend]) if args.backend else contextlib.nullcontext()
    rows = []
    with context:
        for shape in SHAPES:
            b, h, l, d, causal = shape
            flops = 4.0 * b * h * l * l * d / (2.0 if causal else 1.0)
            for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
                forward = time_sdpa(shape, dtype, False)
                both = time_sdpa(shape, dtype, True)
                rows.append(f"| {b} x {h} x {l} x {d} | {'yes' if causal else 'no'} | {name} | torch sdpa "
                            f"({args.backend or 'auto'}) | {forward:.3f} | {flops / forward / 1e9:.1f} | {both:.3f} | "
                            f"{3.5 * flops / both / 1e9:.1f} |")
            print(f"measured {shape}", file=sys.stderr)
    print(f"PyTorch {torch.__version__} SDPA on {torch.cuda.get_device_name()} (median of {SAMPLES} samples of "
          f"{ITERATIONS} calls)\n")
    print("| B x H x L x D | causal | dtype | path | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

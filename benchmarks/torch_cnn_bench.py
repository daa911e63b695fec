"""Times one training step of the digits CNN of cnn_bench.cpp in PyTorch, eager and under torch.compile, and prints
a markdown table in cnn_bench's rows (milliseconds per step):

    Conv2d(1, 32, 3, padding=1), ReLU, Conv2d(32, 64, 3, padding=1), ReLU, MaxPool2d(2), Flatten,
    Linear(1024, 128), ReLU, Linear(128, 10); batch 1024 of 1 x 8 x 8 float32 images

One step: zero_grad, forward, cross-entropy against one-hot float32 class probabilities (as cnn_bench, whose captured
step needs them), backward, and SGD (lr 0.01, momentum 0.9) or Adam (lr 1e-3). On CUDA with
torch.backends.cudnn.benchmark = True, TF32 off (float32 products, as tandem's default), and the model and images in
channels_last. "torch.compile" compiles the model (default mode; --compile-mode picks another); the loss, backward and
optimizer step run as in eager. Method: after a warm-up (which includes the compilation), the median over the
samples of one synchronized step, and of a loop of 10 back-to-back steps divided by 10.

    python3 benchmarks/torch_cnn_bench.py [--device cuda|cpu] [--steps N] [--modes eager,compile]
                                          [--compile-mode MODE]

--device cpu with a few --steps checks the script where there is no GPU.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_bench_support import median_step_ms  # noqa: E402

BATCH, CLASSES, LOOP, WARMUP = 1024, 10, 10, 10


def digits_cnn():
    from torch import nn
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 128), nn.ReLU(), nn.Linear(128, CLASSES))


def time_step(device, adam, mode, loop, args):
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    model = digits_cnn().to(device, memory_format=torch.channels_last)
    images = torch.randn(BATCH, 1, 8, 8, device=device).to(memory_format=torch.channels_last)
    targets = F.one_hot(torch.randint(0, CLASSES, (BATCH,)), CLASSES).float().to(device)
    if adam:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    run = torch.compile(model, mode=args.compile_mode) if mode == "compile" else model

    def step():
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(run(images), targets).backward()
        optimizer.step()

    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    samples = max(1, args.steps // LOOP) if loop else args.steps
    return median_step_ms(step, WARMUP, samples, synchronize, loop=LOOP if loop else 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--steps", type=int, default=50, help="timed samples of one step (a tenth of them of a loop)")
    parser.add_argument("--modes", default="eager,compile", help="comma-separated: eager, compile")
    parser.add_argument("--compile-mode", default=None, help="torch.compile's mode (default: its default)")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if args.steps < 1 or not modes or any(mode not in ("eager", "compile") for mode in modes):
        parser.error("--steps must be at least 1 and --modes a comma-separated list of eager and compile")
    try:
        import torch
    except ImportError:
        print("torch_cnn_bench: torch is not installed; nothing to measure")
        return 0
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("torch_cnn_bench: no GPU visible; nothing to measure (--device cpu runs on the CPU)")
            return 0
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    names = {"eager": "eager", "compile": "torch.compile"}
    lines = ["| optimizer | step | " + " | ".join(names[mode] for mode in modes) + " |",
             "|---|---|" + "---|" * len(modes)]
    for adam in (False, True):
        for loop in (False, True):
            cells = [f"{time_step(args.device, adam, mode, loop, args):.3f}" for mode in modes]
            lines.append(f"| {'Adam' if adam else 'SGD, momentum 0.9'} | "
                         f"{f'in a loop of {LOOP}' if loop else 'synchronized'} | " + " | ".join(cells) + " |")
    where = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"torch {torch.__version__}: digits CNN, batch {BATCH} of 1 x 8 x 8, milliseconds per training step on "
          f"{where} (median)\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

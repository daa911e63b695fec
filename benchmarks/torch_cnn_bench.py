"""Times one training step of a CNN of cnn_bench.cpp in PyTorch, eager and under torch.compile, and prints a
markdown table in cnn_bench's rows (milliseconds per step):

    --model digits: Conv2d(1, 32, 3, padding=1), ReLU, Conv2d(32, 64, 3, padding=1), ReLU, MaxPool2d(2), Flatten,
                    Linear(1024, 128), ReLU, Linear(128, 10); batch 1024 of 1 x 8 x 8 float32 images
    --model resnet18: torchvision's resnet18 structure with the CIFAR stem (3x3 stride-1 conv1, no max pool), as
                    trainers::make_resnet18 (tests/support/torch_resnet.py); batch 512 of 3 x 32 x 32 images, under
                    torch.autocast(bfloat16) (bf16 products, float32 parameters and optimizer)

One step: zero_grad, forward, cross-entropy against one-hot float32 class probabilities (as cnn_bench, whose captured
step needs them), backward, and SGD (lr 0.01, momentum 0.9) or Adam (lr 1e-3). On CUDA with
torch.backends.cudnn.benchmark = True, TF32 off (float32 products, as tandem's default), and the model and images in
channels_last. "torch.compile" compiles the model (default mode; --compile-mode picks another); the loss, backward and
optimizer step run as in eager. Method: after a warm-up (which includes the compilation), the median over the
samples of one synchronized step, and of a loop of 10 back-to-back steps divided by 10.

    python3 benchmarks/torch_cnn_bench.py [--model digits|resnet18] [--device cuda|cpu] [--steps N]
                                          [--modes eager,compile]
                                          [--compile-mode MODE]

--device cpu with a few --steps checks the script where there is no GPU.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_bench_support import median_step_ms  # noqa: E402

CLASSES, LOOP, WARMUP = 10, 10, 10


def digits_cnn():
    from torch import nn
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 128), nn.ReLU(), nn.Linear(128, CLASSES))


def resnet18():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
    from torch_resnet import ResNet
    return ResNet(64, CLASSES)


# --model: the network, its batch of images [N, C, H, W], whether it runs under bf16 autocast, the table's title.
MODELS = {
    "digits": (digits_cnn, (1024, 1, 8, 8), False, "digits CNN, batch 1024 of 1 x 8 x 8"),
    "resnet18": (resnet18, (512, 3, 32, 32), True, "ResNet-18, batch 512 of 3 x 32 x 32, bf16"),
}


def time_step(device, adam, mode, loop, args):
    import contextlib
    import torch
    import torch.nn.functional as F
    make, shape, bf16, _ = MODELS[args.model]
    torch.manual_seed(0)
    model = make().to(device, memory_format=torch.channels_last)
    images = torch.randn(*shape, device=device).to(memory_format=torch.channels_last)
    targets = F.one_hot(torch.randint(0, CLASSES, (shape[0],)), CLASSES).float().to(device)
    autocast = (lambda: torch.autocast(device_type=device, dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    if adam:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    run = torch.compile(model, mode=args.compile_mode) if mode == "compile" else model

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            logits = run(images)
        F.cross_entropy(logits.float(), targets).backward()
        optimizer.step()

    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    samples = max(1, args.steps // LOOP) if loop else args.steps
    return median_step_ms(step, WARMUP, samples, synchronize, loop=LOOP if loop else 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="digits")
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
    print(f"torch {torch.__version__}: {MODELS[args.model][3]}, milliseconds per training step on {where} "
          f"(median)\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Writes the ResNet parity replay of tests/trainers/resnet_torch_replay_test.cpp: torchvision's resnet18 structure
with the CIFAR stem (3x3 stride-1 convolution, no max pool), built here in PyTorch with torchvision's module names,
its state_dict (parameters and batch-norm buffers) as a safetensors file that both frameworks load, and PyTorch's
float32 results on one batch of 3 x 32 x 32 images:
  - eval mode (running statistics): logits and the cross-entropy loss;
  - training mode (batch statistics): logits, loss, every parameter's gradient, and the running statistics after
    that one forward.

    python3 tests/trainers/torch_replay/make_resnet_replay.py tests/trainers/torch_replay            # width 4
    python3 tests/trainers/torch_replay/make_resnet_replay.py /tmp/resnet64 --width 64              # ResNet-18

The committed files have width 4 (layers of 4, 8, 16, 32 channels) to stay small; the full width (64-128-256-512,
44 MB of weights) is written on demand and read by the test when TANDEM_RESNET_REPLAY_DIR names its directory.
Only torch is needed: the files are written by tests/support/write_safetensors.py.
"""
import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from torch_resnet import ResNet  # noqa: E402
from write_safetensors import write_safetensors  # noqa: E402

BATCH = 4
CLASSES = 10
SEED = 20261205


def perturb_batch_norms(model):
    """Moves every batch norm off its initial ones and zeros (and its running statistics off 0 and 1), so that each
    of them counts in the results."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            with torch.no_grad():
                module.weight.normal_(1.0, 0.2)
                module.bias.normal_(0.0, 0.2)
                module.running_mean.normal_(0.0, 0.2)
                module.running_var.uniform_(0.5, 1.5)
                module.num_batches_tracked.fill_(3)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--width", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.allow_tf32 = False
    model = ResNet(args.width, CLASSES)
    perturb_batch_norms(model)
    state = [(name, tensor.detach().clone()) for name, tensor in model.state_dict().items()]
    images = torch.randn(BATCH, 3, 32, 32)
    labels = torch.randint(0, CLASSES, (BATCH,))

    model.eval()
    with torch.no_grad():
        eval_logits = model(images)
    eval_loss = F.cross_entropy(eval_logits, labels)

    model.train()
    train_logits = model(images)
    train_loss = F.cross_entropy(train_logits, labels)
    train_loss.backward()

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "resnet_weights.safetensors", state, {"format": "pt"})
    expected = [("images", images), ("labels", labels), ("eval_logits", eval_logits),
                ("eval_loss", eval_loss.reshape(1)), ("train_logits", train_logits.detach()),
                ("train_loss", train_loss.detach().reshape(1))]
    expected += [("grad." + name, p.grad) for name, p in model.named_parameters()]
    expected += [("after." + name, b.detach()) for name, b in model.named_buffers()]
    metadata = {"width": json.dumps(args.width), "classes": json.dumps(CLASSES), "torch": torch.__version__}
    write_safetensors(out / "resnet_expected.safetensors", expected, metadata)
    print(f"eval loss {eval_loss.item():.6f}, train loss {train_loss.item():.6f}; "
          f"{sum(p.numel() for p in model.parameters())} parameters; torch {torch.__version__}")


if __name__ == "__main__":
    main()

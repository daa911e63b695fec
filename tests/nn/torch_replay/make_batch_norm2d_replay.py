#!/usr/bin/env python3
"""Writes torch.nn.BatchNorm2d on fixed inputs for tests/nn/batch_norm2d_torch_replay_test.cpp:

    python3 tests/nn/torch_replay/make_batch_norm2d_replay.py tests/nn/torch_replay/batch_norm2d_replay.safetensors

For each case NAME the file holds the layer's starting NAME.weight and NAME.bias (where affine), two training
batches NAME.x0 and NAME.x1 ([N, C, H, W], float32) with PyTorch's outputs NAME.out0 and NAME.out1, the gradients
NAME.grad_input, NAME.grad_weight and NAME.grad_bias of sum(out1 * NAME.cotangent) (the second step's only), the
buffers after both steps (NAME.running_mean, NAME.running_var, NAME.num_batches_tracked, where tracked), and an eval
batch NAME.x_eval with its output NAME.out_eval; the metadata holds each case's eps, momentum (null: a cumulative
average), affine and track_running_stats. Only torch is needed: the file is written by
tests/support/write_safetensors.py.
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from write_safetensors import write_safetensors  # noqa: E402

SEED = 20261206
# name, (N, C, H, W), eps, momentum, affine, track_running_stats
CASES = [
    ("momentum", (4, 3, 5, 3), 1e-5, 0.1, True, True),
    ("cumulative_no_affine", (2, 2, 4, 4), 1e-3, None, False, True),
    ("large_momentum_offset", (3, 4, 2, 5), 1e-5, 0.7, True, True),
    ("batch_statistics_only", (5, 2, 3, 3), 1e-5, 0.1, True, False),
]


def main(path):
    torch.manual_seed(SEED)
    tensors, metadata = [], {}
    for name, shape, eps, momentum, affine, track in CASES:
        layer = torch.nn.BatchNorm2d(shape[1], eps=eps, momentum=momentum, affine=affine,
                                     track_running_stats=track)
        entries = []
        if affine:
            with torch.no_grad():
                layer.weight.copy_(torch.randn(shape[1]))
                layer.bias.copy_(torch.randn(shape[1]))
            entries += [("weight", layer.weight.detach().clone()), ("bias", layer.bias.detach().clone())]
        # Batches away from zero mean and unit variance, so that the running statistics move.
        x0 = torch.randn(shape) * 2.0 + 1.5
        x1 = (torch.randn(shape) * 0.5 - 3.0).requires_grad_()
        out0 = layer(x0)
        out1 = layer(x1)
        cotangent = torch.randn(shape)
        (out1 * cotangent).sum().backward()
        entries += [("x0", x0), ("x1", x1), ("out0", out0), ("out1", out1), ("cotangent", cotangent),
                    ("grad_input", x1.grad)]
        if affine:
            entries += [("grad_weight", layer.weight.grad), ("grad_bias", layer.bias.grad)]
        if track:
            entries += [("running_mean", layer.running_mean), ("running_var", layer.running_var),
                        ("num_batches_tracked", layer.num_batches_tracked.reshape([]))]
        layer.eval()
        x_eval = torch.randn(shape) + 0.5
        entries += [("x_eval", x_eval), ("out_eval", layer(x_eval))]
        tensors += [(f"{name}.{part}", t) for part, t in entries]
        metadata[name] = json.dumps({"eps": eps, "momentum": momentum, "affine": affine,
                                     "track_running_stats": track})
    metadata["torch"] = torch.__version__
    write_safetensors(path, tensors, metadata)
    print(f"{len(CASES)} cases; torch {torch.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "batch_norm2d_replay.safetensors")

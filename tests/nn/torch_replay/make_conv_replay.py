#!/usr/bin/env python3
"""Writes PyTorch's conv2d, max_pool2d, avg_pool2d and adaptive_avg_pool2d on fixed inputs for
tests/nn/conv_torch_replay_test.cpp:

    python3 tests/nn/torch_replay/make_conv_replay.py tests/nn/torch_replay/conv_replay.safetensors

For each case NAME the file holds NAME.input (float32, [N, C, H, W], or [C, H, W] for an unbatched case), for a
convolution NAME.weight and NAME.bias where the case has one, PyTorch's float32 output NAME.out, a random upstream
gradient NAME.grad_out, and PyTorch's gradients NAME.grad_input (and NAME.grad_weight, NAME.grad_bias) of
sum(out * grad_out). The metadata holds each case's op and arguments as JSON: sizes as
[height, width], a convolution's padding as [height, width] or "same" / "valid". Only torch is needed: the file is
written by tests/support/write_safetensors.py.
"""
import json
import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from write_safetensors import write_safetensors  # noqa: E402

SEED = 20261206

# name, input shape, out_channels, kernel [kH, kW], stride, padding ([h, w] | "same" | "valid"), dilation, groups,
# bias
CONV_CASES = [
    ("conv_1x1", (2, 3, 5, 7), 4, (1, 1), (1, 1), (0, 0), (1, 1), 1, True),
    ("conv_3x3_pad1", (2, 3, 7, 7), 4, (3, 3), (1, 1), (1, 1), (1, 1), 1, True),
    ("conv_3x3_stride2_no_bias", (1, 4, 9, 8), 5, (3, 3), (2, 2), (1, 1), (1, 1), 1, False),
    ("conv_5x5_pad2", (2, 2, 9, 7), 3, (5, 5), (1, 1), (2, 2), (1, 1), 1, True),
    ("conv_3x2_stride21_pad12", (3, 2, 7, 6), 4, (3, 2), (2, 1), (1, 2), (1, 1), 1, True),
    ("conv_dilation2", (2, 3, 9, 9), 4, (3, 3), (1, 1), (2, 2), (2, 2), 1, True),
    ("conv_groups2", (2, 4, 6, 7), 6, (3, 3), (1, 1), (1, 1), (1, 1), 2, True),
    ("conv_depthwise", (2, 5, 7, 6), 5, (3, 3), (1, 1), (1, 1), (1, 1), 5, True),
    ("conv_depthwise_multiplier_stride2", (2, 3, 9, 7), 6, (3, 3), (2, 2), (0, 0), (1, 1), 3, False),
    ("conv_same_3x3", (2, 3, 7, 5), 4, (3, 3), (1, 1), "same", (1, 1), 1, True),
    ("conv_same_even_2x4", (2, 2, 6, 7), 3, (2, 4), (1, 1), "same", (1, 1), 1, True),
    ("conv_same_dilation2_groups2", (1, 4, 8, 9), 4, (3, 3), (1, 1), "same", (2, 2), 2, False),
    ("conv_valid_3x2_groups2", (2, 4, 6, 5), 2, (3, 2), (1, 1), "valid", (1, 1), 2, True),
    ("conv_dilation21_stride12_groups2", (2, 4, 9, 8), 6, (3, 3), (1, 2), (2, 0), (2, 1), 2, True),
    ("conv_stride3_pad1_5x5", (2, 2, 11, 10), 3, (5, 5), (3, 3), (1, 1), (1, 1), 1, True),
    ("conv_unbatched", (3, 6, 5), 4, (3, 3), (1, 2), (1, 1), (1, 1), 1, True),
]

# name, op, input shape, settings; "ties" draws small integers so that windows hold equal values
POOL_CASES = [
    ("max_k2", "max_pool2d", (2, 3, 6, 7), dict(kernel=[2, 2], stride=[2, 2], padding=[0, 0], dilation=[1, 1])),
    ("max_k3_stride2_pad1", "max_pool2d", (2, 2, 7, 8),
     dict(kernel=[3, 3], stride=[2, 2], padding=[1, 1], dilation=[1, 1])),
    ("max_k3_stride1_dilation2_pad1", "max_pool2d", (1, 3, 9, 8),
     dict(kernel=[3, 3], stride=[1, 1], padding=[1, 1], dilation=[2, 2])),
    ("max_k32_stride21_ceil", "max_pool2d", (2, 2, 8, 7),
     dict(kernel=[3, 2], stride=[2, 1], padding=[1, 0], dilation=[1, 1], ceil_mode=True)),
    ("max_k2_ceil_odd", "max_pool2d", (2, 2, 7, 9),
     dict(kernel=[2, 2], stride=[2, 2], padding=[0, 0], dilation=[1, 1], ceil_mode=True)),
    ("max_k3_stride1_ties", "max_pool2d", (1, 2, 6, 6),
     dict(kernel=[3, 3], stride=[1, 1], padding=[1, 1], dilation=[1, 1], ties=True)),
    ("max_unbatched", "max_pool2d", (3, 5, 6), dict(kernel=[2, 3], stride=[1, 2], padding=[1, 1], dilation=[1, 1])),
    ("avg_k2", "avg_pool2d", (2, 3, 6, 7), dict(kernel=[2, 2], stride=[2, 2], padding=[0, 0])),
    ("avg_k3_stride2_pad1", "avg_pool2d", (2, 2, 7, 8), dict(kernel=[3, 3], stride=[2, 2], padding=[1, 1])),
    ("avg_k3_stride1_pad1_exclude_pad", "avg_pool2d", (1, 3, 6, 5),
     dict(kernel=[3, 3], stride=[1, 1], padding=[1, 1], count_include_pad=False)),
    ("avg_k32_stride21_pad11_ceil", "avg_pool2d", (2, 2, 8, 7),
     dict(kernel=[3, 2], stride=[2, 1], padding=[1, 1], ceil_mode=True)),
    ("avg_k32_stride21_pad11_ceil_exclude_pad", "avg_pool2d", (2, 2, 8, 7),
     dict(kernel=[3, 2], stride=[2, 1], padding=[1, 1], ceil_mode=True, count_include_pad=False)),
    ("avg_k3_stride2_ceil_odd", "avg_pool2d", (1, 2, 8, 9), dict(kernel=[3, 3], stride=[2, 2], padding=[0, 0],
                                                                  ceil_mode=True)),
    ("adaptive_7x7_to_3x3", "adaptive_avg_pool2d", (2, 3, 7, 7), dict(output_size=[3, 3])),
    ("adaptive_9x5_to_4x2", "adaptive_avg_pool2d", (2, 2, 9, 5), dict(output_size=[4, 2])),
    ("adaptive_6x6_to_1x1", "adaptive_avg_pool2d", (2, 4, 6, 6), dict(output_size=[1, 1])),
    ("adaptive_3x4_to_5x6", "adaptive_avg_pool2d", (1, 2, 3, 4), dict(output_size=[5, 6])),
    ("adaptive_unbatched", "adaptive_avg_pool2d", (3, 7, 6), dict(output_size=[2, 4])),
]


def conv_case(name, shape, out_channels, kernel, stride, padding, dilation, groups, has_bias):
    x = torch.randn(shape, requires_grad=True)
    w = torch.randn(out_channels, shape[-3] // groups, *kernel, requires_grad=True)
    b = torch.randn(out_channels, requires_grad=True) if has_bias else None
    torch_padding = padding if isinstance(padding, str) else tuple(padding)
    out = F.conv2d(x, w, b, stride=stride, padding=torch_padding, dilation=dilation, groups=groups)
    grad_out = torch.randn(out.shape)
    (out * grad_out).sum().backward()
    entries = [("input", x), ("weight", w), ("grad_out", grad_out), ("out", out), ("grad_input", x.grad),
               ("grad_weight", w.grad)]
    if b is not None:
        entries += [("bias", b), ("grad_bias", b.grad)]
    settings = {"op": "conv2d", "stride": list(stride), "padding": padding if isinstance(padding, str)
                else list(padding), "dilation": list(dilation), "groups": groups}
    return entries, settings


def pool_case(op, shape, settings):
    settings = dict(settings)
    ties = settings.pop("ties", False)
    x = torch.randint(0, 4, shape).float() if ties else torch.randn(shape)
    x.requires_grad_(True)
    if op == "max_pool2d":
        out = F.max_pool2d(x, settings["kernel"], settings["stride"], settings["padding"], settings["dilation"],
                           ceil_mode=settings.get("ceil_mode", False))
    elif op == "avg_pool2d":
        out = F.avg_pool2d(x, settings["kernel"], settings["stride"], settings["padding"],
                           ceil_mode=settings.get("ceil_mode", False),
                           count_include_pad=settings.get("count_include_pad", True))
    else:
        out = F.adaptive_avg_pool2d(x, settings["output_size"])
    grad_out = torch.randn(out.shape)
    (out * grad_out).sum().backward()
    entries = [("input", x), ("grad_out", grad_out), ("out", out), ("grad_input", x.grad)]
    return entries, {"op": op, **settings}


def main(path):
    # PyTorch warns that "same" with an even kernel copies the input padded: true, and no concern here.
    warnings.filterwarnings("ignore", message="Using padding='same'")
    torch.manual_seed(SEED)
    tensors, metadata = [], {}
    cases = [(c[0], conv_case(*c)) for c in CONV_CASES] + [(c[0], pool_case(*c[1:])) for c in POOL_CASES]
    for name, (entries, settings) in cases:
        tensors += [(f"{name}.{part}", t) for part, t in entries]
        metadata[name] = json.dumps(settings)
    metadata["torch"] = torch.__version__
    write_safetensors(path, tensors, metadata)
    print(f"{len(CONV_CASES)} convolutions, {len(POOL_CASES)} poolings; torch {torch.__version__}; "
          f"{Path(path).stat().st_size} bytes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "conv_replay.safetensors")

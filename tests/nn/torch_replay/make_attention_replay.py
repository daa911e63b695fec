#!/usr/bin/env python3
"""Writes PyTorch's scaled_dot_product_attention on fixed inputs for tests/nn/attention_torch_replay_test.cpp:

    python3 tests/nn/torch_replay/make_attention_replay.py tests/nn/torch_replay/attention_replay.safetensors

For each case NAME the file holds NAME.query, NAME.key, NAME.value (float32, [B, H, L, E], [B, H, S, E],
[B, H, S, Ev]), NAME.mask where the case has one (float32 added to the scores, or int64 0/1 for PyTorch's boolean
mask), PyTorch's float32 output NAME.out and the gradients NAME.grad_query, NAME.grad_key, NAME.grad_value of
sum(out * NAME.weights) (a fixed random weighting, so that every output element counts with its own factor); the
metadata holds each case's is_causal and scale. Only torch is needed: the file is written by tests/support/write_safetensors.py.
"""
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from write_safetensors import write_safetensors  # noqa: E402

SEED = 20261205
# name, (batch, heads, L, S, E, Ev), is_causal, scale, mask ("" | "float" | "bool")
CASES = [
    ("causal_64", (2, 3, 33, 33, 64, 64), True, None, ""),
    ("full_32_rectangular", (1, 2, 17, 40, 32, 32), False, None, ""),
    ("causal_128_short_keys", (1, 1, 24, 9, 128, 128), True, None, ""),
    ("scaled_value_width", (2, 1, 12, 20, 32, 48), False, 0.3, ""),
    ("float_mask", (1, 2, 10, 14, 32, 32), False, None, "float"),
    ("bool_mask", (2, 1, 9, 11, 16, 24), False, None, "bool"),
]


def main(path):
    torch.manual_seed(SEED)
    tensors, metadata = [], {}
    for name, (b, h, l, s, e, ev), is_causal, scale, mask_kind in CASES:
        q = torch.randn(b, h, l, e, requires_grad=True)
        k = torch.randn(b, h, s, e, requires_grad=True)
        v = torch.randn(b, h, s, ev, requires_grad=True)
        mask, mask_file = None, None
        if mask_kind == "float":
            mask = torch.randn(l, s)
            mask_file = mask
        elif mask_kind == "bool":
            keep = torch.rand(b, 1, l, s) < 0.7
            keep[..., 0] = True  # no row leaves out every key
            mask, mask_file = keep, keep.to(torch.int64)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)
        weights = torch.randn(out.shape)
        (out * weights).sum().backward()
        entries = [("query", q), ("key", k), ("value", v), ("weights", weights), ("out", out),
                   ("grad_query", q.grad), ("grad_key", k.grad), ("grad_value", v.grad)]
        if mask_file is not None:
            entries.append(("mask", mask_file))
        tensors += [(f"{name}.{part}", t) for part, t in entries]
        metadata[name] = json.dumps({"is_causal": is_causal, "scale": scale})
    metadata["torch"] = torch.__version__
    write_safetensors(path, tensors, metadata)
    print(f"{len(CASES)} cases; torch {torch.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "attention_replay.safetensors")

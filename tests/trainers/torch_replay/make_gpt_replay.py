#!/usr/bin/env python3
"""Writes the GPT parity replay of tests/trainers/gpt_torch_replay_test.cpp: a small GPT-2-structured model in
PyTorch (nanoGPT's module names, pre-LayerNorm blocks, GELU's tanh form, causal SDPA, the head tied to the token
embedding), its weights as a safetensors file that both frameworks load, and one batch's loss and every parameter's
gradient computed by PyTorch in float32.

    python3 tests/trainers/torch_replay/make_gpt_replay.py tests/trainers/torch_replay

writes gpt_weights.safetensors (the state_dict, the tied tensor once under transformer.wte.weight) and
gpt_expected.safetensors (tokens, targets, loss, grad.<name> for each parameter; the configuration in its metadata).
Only torch is needed: the files are written by tests/support/write_safetensors.py.
"""
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from write_safetensors import write_safetensors  # noqa: E402

CONFIG = {"vocab_size": 32, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 64, "bias": True}
BATCH = 4
SEED = 20261204


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        e = c["n_embd"]
        self.n_head = c["n_head"]
        self.ln_1 = nn.LayerNorm(e, bias=c["bias"])
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(e, 3 * e, bias=c["bias"])
        self.attn.c_proj = nn.Linear(e, e, bias=c["bias"])
        self.ln_2 = nn.LayerNorm(e, bias=c["bias"])
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(e, 4 * e, bias=c["bias"])
        self.mlp.c_proj = nn.Linear(4 * e, e, bias=c["bias"])

    def attention(self, x):
        b, t, e = x.shape
        heads = [part.view(b, t, self.n_head, e // self.n_head).transpose(1, 2)
                 for part in self.attn.c_attn(x).split(e, dim=2)]
        y = F.scaled_dot_product_attention(*heads, is_causal=True)
        return self.attn.c_proj(y.transpose(1, 2).contiguous().view(b, t, e))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(c["vocab_size"], c["n_embd"]),
            "wpe": nn.Embedding(c["block_size"], c["n_embd"]),
            "h": nn.ModuleList(Block(c) for _ in range(c["n_layer"])),
            "ln_f": nn.LayerNorm(c["n_embd"], bias=c["bias"]),
        })
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1])
        x = self.transformer.wte(tokens) + self.transformer.wpe(positions)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def initialize(model, c):
    """nanoGPT's initialization, with the LayerNorms and biases moved off ones and zeros so that their gradients and
    their paths through the model are exercised too."""
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight"):
            nn.init.normal_(p, std=0.02 / math.sqrt(2 * c["n_layer"]))
        elif p.dim() == 2:
            nn.init.normal_(p, std=0.02)
        elif "ln_" in name and name.endswith("weight"):
            nn.init.normal_(p, mean=1.0, std=0.1)
        else:
            nn.init.normal_(p, std=0.05)


def main(out_dir):
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    model = GPT(CONFIG)
    initialize(model, CONFIG)
    tokens = torch.randint(0, CONFIG["vocab_size"], (BATCH, CONFIG["block_size"] + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    logits = model(inputs)
    loss = F.cross_entropy(logits.view(-1, CONFIG["vocab_size"]), targets.view(-1))
    loss.backward()

    named = list(model.named_parameters())  # the tied tensor once, under transformer.wte.weight
    out = Path(out_dir)
    write_safetensors(out / "gpt_weights.safetensors", named, {"format": "pt"})
    expected = [("tokens", inputs), ("targets", targets), ("loss", loss.detach().reshape(1))]
    expected += [("grad." + name, p.grad) for name, p in named]
    metadata = {key: json.dumps(value) for key, value in CONFIG.items()}
    metadata["torch"] = torch.__version__
    write_safetensors(out / "gpt_expected.safetensors", expected, metadata)
    print(f"loss {loss.item():.6f}; {sum(p.numel() for _, p in named)} parameters; torch {torch.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")

"""The PyTorch side of the GPT comparisons: nanoGPT's model (the same structure, names and initialization as
trainers::make_gpt: pre-LayerNorm blocks, GELU's tanh form, causal SDPA, tied embedding and head, N(0, 0.02) with
scaled residual projections) trained as nanoGPT's train.py trains config/train_shakespeare_char.py: random windows of
the text's first 90% (characters as tokens, ids in code point order), AdamW (fused, betas 0.9/0.99, weight decay 0.1 on
the matrices), a linear warm-up then a cosine learning rate, clipping at 1.0, bf16 autocast.

  python3 torch_gpt.py learn --data data/shakespeare.txt --steps 5000 [--compile]   # the learning run, timed
  python3 torch_gpt.py step --batch 64 --block 256 [--compile]                      # ms per training step

Prints one JSON line. Nothing is typed in: every figure is measured by this run.
"""
import argparse
import json
import math
import time


def build(vocab, block, n_layer, n_head, n_embd, dropout, bias=True):
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
            self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
            self.resid_dropout = nn.Dropout(dropout)

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout if self.training else 0.0, is_causal=True)
            return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
            self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd, bias=bias)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(n_embd, bias=bias)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab, n_embd), wpe=nn.Embedding(block, n_embd), drop=nn.Dropout(dropout),
                h=nn.ModuleList([Block() for _ in range(n_layer)]), ln_f=nn.LayerNorm(n_embd, bias=bias)))
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.transformer.wte.weight = self.lm_head.weight
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                    torch.nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    torch.nn.init.zeros_(p)

        def forward(self, idx):
            pos = torch.arange(idx.size(1), device=idx.device)
            x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for block in self.transformer.h:
                x = block(x)
            return self.lm_head(self.transformer.ln_f(x))

    return GPT()


def optimizer_for(model, lr, weight_decay):
    import torch
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99), fused=True)


def lr_at(step, lr, min_lr, warmup, decay):
    if step < warmup:
        return lr * (step + 1) / (warmup + 1)
    if step > decay:
        return min_lr
    ratio = (step - warmup) / (decay - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def make_step(model, optimizer, vocab):
    import torch
    from torch.nn import functional as F

    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss
    return step


def learn(args):
    import torch
    torch.manual_seed(1337)
    text = open(args.data, encoding="utf-8").read()
    chars = sorted(set(text))
    ids = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([ids[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    train, val = data[:n], data[n:]
    model = build(len(chars), args.block, args.n_layer, args.n_head, args.n_embd, args.dropout).cuda()
    optimizer = optimizer_for(model, args.lr, 0.1)
    run = torch.compile(model) if args.compile else model
    step = make_step(run, optimizer, len(chars))

    def batch(split):
        starts = torch.randint(len(split) - args.block, (args.batch,))
        x = torch.stack([split[i:i + args.block] for i in starts])
        y = torch.stack([split[i + 1:i + 1 + args.block] for i in starts])
        return x.pin_memory().cuda(non_blocking=True), y.pin_memory().cuda(non_blocking=True)

    @torch.no_grad()
    def estimate(split):
        model.eval()
        total = 0.0
        for _ in range(args.eval_batches):
            x, y = batch(split)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                total += torch.nn.functional.cross_entropy(run(x).view(-1, len(chars)), y.view(-1)).item()
        model.train()
        return total / args.eval_batches

    evaluations = []
    torch.cuda.synchronize()
    start = time.perf_counter()
    for it in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(it, args.lr, 1e-4, 100, args.steps)
        step(*batch(train))
        if (it + 1) % args.eval_every == 0 or it + 1 == args.steps:
            evaluations.append({"step": it + 1, "train_loss": estimate(train), "val_loss": estimate(val)})
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(json.dumps({"mode": "learn", "compile": args.compile, "seconds": seconds, "evaluations": evaluations,
                      "val_loss": evaluations[-1]["val_loss"], "torch": torch.__version__,
                      "parameters": sum(p.numel() for p in model.parameters())}))


def step_time(args):
    import torch
    torch.manual_seed(0)
    model = build(args.vocab, args.block, args.n_layer, args.n_head, args.n_embd, args.dropout).cuda()
    optimizer = optimizer_for(model, 1e-4, 0.1)
    run = torch.compile(model) if args.compile else model
    step = make_step(run, optimizer, args.vocab)
    x = torch.randint(args.vocab, (args.batch, args.block), device="cuda")
    y = torch.randint(args.vocab, (args.batch, args.block), device="cuda")
    for _ in range(10):
        step(x, y)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        step(x, y)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) * 1e3 / args.steps
    tokens = args.batch * args.block / (ms / 1e3)
    print(json.dumps({"mode": "step", "compile": args.compile, "ms_per_step": ms, "tokens_per_second": tokens,
                      "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30, "batch": args.batch,
                      "block": args.block, "n_layer": args.n_layer, "n_embd": args.n_embd, "torch": torch.__version__}))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["learn", "step"])
    parser.add_argument("--data", default="data/shakespeare.txt")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--eval-every", type=int, default=500)
    parser.add_argument("--eval-batches", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--n-layer", type=int, default=6)
    parser.add_argument("--n-head", type=int, default=6)
    parser.add_argument("--n-embd", type=int, default=384)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--vocab", type=int, default=84)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    learn(args) if args.mode == "learn" else step_time(args)


if __name__ == "__main__":
    main()

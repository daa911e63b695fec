#!/usr/bin/env python3
"""Times torch.cuda.comm at the sizes and with the method of comm_bench, for the same table.

Method: host wall clock. Every GPU is synchronized, `iterations` calls are issued back to back, every GPU is
synchronized again; the time per call is the elapsed time divided by `iterations`; median of `samples` such samples
after a warm-up. Coalesced variants move 4 tensors of size/4; scatter/gather split size over the GPUs, to/from
cuda:0.

    python3 benchmarks/torch_comm_bench.py [--gpus N] [--samples S] [--iterations K] [--markdown PATH]
"""

import argparse
import statistics
import sys
import time

SIZES = [4 << 10, 1 << 20, 64 << 20, 256 << 20]


def size_label(nbytes):
    return f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"


def split(count, parts):
    return [count // parts + (1 if p < count % parts else 0) for p in range(parts)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", "--devices", type=int, default=2)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--markdown", default="")
    args = parser.parse_args()

    try:
        import torch
        import torch.cuda.comm as comm
    except ImportError:
        print("torch_comm_bench: torch is not installed; nothing to measure")
        return 0
    visible = torch.cuda.device_count()
    if visible < 2:
        print(f"torch_comm_bench: needs at least 2 GPUs, {visible} visible; nothing to measure")
        return 0
    gpus = min(args.gpus, visible)
    devices = [torch.device("cuda", d) for d in range(gpus)]

    def synchronize_all():
        for d in devices:
            torch.cuda.synchronize(d)

    def timed(call):
        for _ in range(args.warmup):
            call()
        synchronize_all()
        per_call = []
        for _ in range(args.samples):
            start = time.perf_counter()
            for _ in range(args.iterations):
                call()
            synchronize_all()
            per_call.append((time.perf_counter() - start) * 1e6 / args.iterations)
        return statistics.median(per_call)

    rows = []
    for nbytes in SIZES:
        count = nbytes // 4
        full = [torch.ones(count, device=d) for d in devices]
        quarters = [[torch.ones(q, device=d) for q in split(count, 4)] for d in devices]
        part_sizes = split(count, gpus)
        parts = [torch.ones(p, device=d) for p, d in zip(part_sizes, devices)]
        ops = [
            ("broadcast", lambda: comm.broadcast(full[0], devices)),
            ("reduce_add", lambda: comm.reduce_add(full, destination=0)),
            ("broadcast_coalesced", lambda: comm.broadcast_coalesced(quarters[0], devices)),
            ("reduce_add_coalesced", lambda: comm.reduce_add_coalesced(quarters, destination=0)),
            ("scatter", lambda: comm.scatter(full[0], devices, chunk_sizes=part_sizes)),
            ("gather", lambda: comm.gather(parts, dim=0, destination=0)),
        ]
        for name, call in ops:
            us = timed(call)
            rows.append((name, nbytes, us))
            print(f"  {name:<22} {size_label(nbytes):>7}  torch {us:10.1f} us", file=sys.stderr)
        del full, quarters, parts

    table = [
        f"torch.cuda.comm (torch {torch.__version__}) on {gpus} x {torch.cuda.get_device_name(0)}. Time per call: host "
        f"wall clock over {args.iterations} back-to-back calls between synchronizes of every GPU, median of "
        f"{args.samples} samples. GB/s = size / time.",
        "",
        "| op | size | torch us | GB/s |",
        "|---|---|---|---|",
    ]
    table += [f"| {name} | {size_label(nbytes)} | {us:.1f} | {nbytes / (us * 1e3):.1f} |" for name, nbytes, us in rows]
    text = "\n".join(table) + "\n"
    print(text, end="")
    if args.markdown:
        with open(args.markdown, "w") as file:
            file.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

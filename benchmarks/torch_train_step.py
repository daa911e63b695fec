#!/usr/bin/env python3
"""The PyTorch side of train_step_bench: one training step (forward, MSE, backward, SGD with momentum) on one GPU,
with nn.DataParallel, and with DistributedDataParallel (one process per GPU, NCCL), for the same two workloads:
  seed  Linear(10, 20) -> Linear(20, 1), global batch 4096
  wide  4 x Linear(4096, 4096) with ReLU between, global batch 8192, float32 (PyTorch's default matmul precision)
  wide-tf32  the same with torch.backends.cuda.matmul.allow_tf32 = True (train_step_bench --precision tf32)
Method as train_step_bench: inputs and targets on cuda:0, every GPU synchronized before and after each step, host
wall clock, median over the timed steps after a warm-up; and, as train_step_bench's second figure, the same over a
loop of back-to-back steps (20 for the seed net, 4 for the wide MLP) divided by their number. On one GPU the step is
also captured whole as one CUDA graph (torch.cuda.graph) and replayed, beside tandem's captured step. DistributedDataParallel gets each rank's share of the batch
already on its GPU (no scatter) and times each step between synchronizations of its own GPU; rank 0 reports.

Usage: python3 benchmarks/torch_train_step.py [--gpus N] [--workloads seed,wide,wide-tf32]
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from torch_bench_support import graphed_sgd_mse_step, median_step_ms, seed_net, sgd_mse_step, wide_mlp


WORKLOADS = {
    # key: (title, make, batch, inputs, outputs, warm-up steps, timed steps, steps per loop, timed loops, TF32)
    "seed": ("seed net, batch 4096", seed_net, 4096, 10, 1, 50, 500, 20, 50, False),
    "wide": ("wide MLP, batch 8192", wide_mlp, 8192, 4096, 4096, 5, 30, 4, 8, False),
    "wide-tf32": ("wide MLP TF32, batch 8192", wide_mlp, 8192, 4096, 4096, 5, 30, 4, 8, True),
}


def synchronize(gpus):
    for gpu in range(gpus):
        torch.cuda.synchronize(gpu)


def time_step(make, batch, inputs, outputs, warmup, steps, gpus, loop=1, graphed=False):
    torch.manual_seed(0)
    model = make().cuda(0)
    runner = nn.DataParallel(model, device_ids=list(range(gpus))) if gpus > 1 else model
    x = torch.randn(batch, inputs, device="cuda:0")
    y = torch.randn(batch, outputs, device="cuda:0")
    step = graphed_sgd_mse_step(model, x, y) if graphed else sgd_mse_step(runner, model.parameters(), x, y)
    return median_step_ms(step, warmup, steps, synchronize=lambda: synchronize(gpus), loop=loop)


def ddp_worker(rank, gpus, workload, results):
    _, make, batch, inputs, outputs, warmup, steps, _, _, tf32 = WORKLOADS[workload]
    torch.backends.cuda.matmul.allow_tf32 = tf32
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=gpus, device_id=torch.device("cuda", rank))
    torch.manual_seed(0)
    model = DistributedDataParallel(make().cuda(rank), device_ids=[rank])
    x = torch.randn(batch // gpus, inputs, device=rank)
    y = torch.randn(batch // gpus, outputs, device=rank)
    median_ms = median_step_ms(sgd_mse_step(model, model.parameters(), x, y), warmup, steps,
                               synchronize=lambda: torch.cuda.synchronize(rank))
    if rank == 0:
        results.put(median_ms)
    dist.destroy_process_group()


def time_ddp(workload, gpus):
    context = mp.get_context("spawn")
    results = context.Queue()
    mp.start_processes(ddp_worker, args=(gpus, workload, results), nprocs=gpus, join=True, start_method="spawn")
    return results.get()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated, from {', '.join(WORKLOADS)} (default: all)")
    args = parser.parse_args()
    keys = [key for key in args.workloads.split(",") if key]
    unknown = [key for key in keys if key not in WORKLOADS]
    if unknown or not keys:
        parser.error(f"--workloads names {unknown or args.workloads!r}; expected some of {', '.join(WORKLOADS)}")
    gpus = min(args.gpus, torch.cuda.device_count())
    if gpus < 1:
        print("torch_train_step: no GPU visible; nothing to measure")
        return
    print(f"PyTorch {torch.__version__}, milliseconds per training step (median)\n")
    print(f"| workload | step | PyTorch 1 GPU | PyTorch 1 GPU, CUDA graph | PyTorch DataParallel ({gpus} GPUs) "
          f"| PyTorch DDP ({gpus} GPUs) |")
    print("|---|---|---|---|---|---|")
    for key in keys:
        name, make, batch, inputs, outputs, warmup, steps, loop, loops, tf32 = WORKLOADS[key]
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for looped in (False, True):
            count, per_sample = (loops, loop) if looped else (steps, 1)
            shape = (make, batch, inputs, outputs, warmup, count)
            one = time_step(*shape, 1, loop=per_sample)
            graphed = time_step(*shape, 1, loop=per_sample, graphed=True)
            many = time_step(*shape, gpus, loop=per_sample) if gpus > 1 else float("nan")
            ddp = time_ddp(key, gpus) if gpus > 1 and not looped else float("nan")
            label = f"in a loop of {loop}" if looped else "synchronized"
            print(f"| {name} | {label} | {one:.3f} | {graphed:.3f} | {many:.3f} | {ddp:.3f} |", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The PyTorch side of ddp_step_bench: one training step under torch.nn.parallel.DistributedDataParallel.

One process per GPU (cuda:<LOCAL_RANK>), NCCL backend, DDP tuned as its documentation advises
(gradient_as_bucket_view=True, static_graph=True), SGD with momentum 0.9, MSE, for the workloads of ddp_step_bench:
  seed        Linear(10, 20) -> Linear(20, 1), global batch 4096
  wide        4 x Linear(4096, 4096) with ReLU between, global batch 8192, plain FP32 GEMMs
  wide-tf32   the same with torch.backends.cuda.matmul.allow_tf32 = True
  wide-bf16   the same, forward and loss under torch.autocast("cuda", dtype=torch.bfloat16) (FP32 weights)
Method (as ddp_step_bench): every rank builds the model from seed 0 and holds its share of the global batch already
on its GPU; after the warm-up steps, each timed step starts with the GPU synchronized and a barrier (so the ranks
start together) and ends when the GPU is synchronized again; the host wall clock between is the step's time, and
rank 0 reports the median, one JSON line per workload (on stdout, and into --jsonl PATH).

Usage: torchrun --standalone --nproc_per_node 2 benchmarks/torch_ddp_bench.py [--workloads seed,wide,wide-tf32,...]
                [--steps N] [--jsonl PATH] [--widths W1,W2,...]
With --widths, the workloads are 4 x Linear(W) with ReLU between, global batch 8192, plain FP32, one per width (the
sweep of benchmarks/width_sweep.sh).
"""
import argparse
import json
import os
import sys

from torch_bench_support import median_step_ms, mlp, seed_net, sgd_mse_step, wide_mlp

# name: (title, make, global batch, inputs, outputs, warm-up steps, timed steps, precision)
WORKLOADS = {
    "seed": ("seed net, batch 4096", seed_net, 4096, 10, 1, 50, 500, "fp32"),
    "wide": ("wide MLP fp32, batch 8192", wide_mlp, 8192, 4096, 4096, 5, 30, "fp32"),
    "wide-tf32": ("wide MLP TF32, batch 8192", wide_mlp, 8192, 4096, 4096, 10, 100, "tf32"),
    "wide-bf16": ("wide MLP bf16, batch 8192", wide_mlp, 8192, 4096, 4096, 10, 100, "bf16"),
}
WIDTH_BATCH = 8192  # the global batch of the --widths sweep (train_step_bench --widths uses the same)


def width_workload(width):
    """The --widths sweep's workload for one width: 4 x Linear(width) with ReLU between, plain FP32."""
    return (f"4 x Linear({width}), batch {WIDTH_BATCH}", lambda: mlp(width), WIDTH_BATCH, width, width, 5, 30, "fp32")


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated, of " + ", ".join(WORKLOADS))
    parser.add_argument("--steps", type=int, default=0, help="timed steps of every workload (default: its own)")
    parser.add_argument("--jsonl", default="", help="also write rank 0's JSON lines to this file")
    parser.add_argument("--widths", default="",
                        help="instead of --workloads: 4 x Linear(W) for each comma-separated width W (a sweep)")
    args = parser.parse_args()
    args.workloads = args.workloads.split(",")
    if args.widths:
        try:
            widths = [int(width) for width in args.widths.split(",")]
        except ValueError:
            parser.error(f"--widths is {args.widths!r} but expected comma-separated integers")
        if any(width < 1 or width > 65536 for width in widths):
            parser.error(f"--widths is {args.widths!r} but expected widths in [1, 65536]")
        args.workloads = []
        for width in widths:
            WORKLOADS[f"mlp-{width}"] = width_workload(width)
            args.workloads.append(f"mlp-{width}")
    for name in args.workloads:
        if name not in WORKLOADS:
            parser.error(f"--workloads names {name!r} but expected one of {', '.join(WORKLOADS)}")
    if args.steps < 0:
        parser.error(f"--steps is {args.steps} but expected a positive number (or 0 for each workload's own)")
    return args


def time_workload(torch, dist, name, steps_override, device, world_size):
    title, make, global_batch, inputs, outputs, warmup, steps, precision = WORKLOADS[name]
    if global_batch % world_size != 0:
        raise SystemExit(f"torch_ddp_bench: global batch {global_batch} of {name} over {world_size} processes "
                         "but expected a batch that splits evenly")
    steps = steps_override or steps
    rows = global_batch // world_size
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(make().to(device), device_ids=[device.index],
                                                      gradient_as_bucket_view=True, static_graph=True)
    x = torch.randn(rows, inputs, device=device)
    y = torch.randn(rows, outputs, device=device)
    autocast_dtype = torch.bfloat16 if precision == "bf16" else None
    median_ms = median_step_ms(sgd_mse_step(model, model.parameters(), x, y, autocast_dtype), warmup, steps,
                               synchronize=lambda: torch.cuda.synchronize(device),
                               start=lambda: dist.barrier(device_ids=[device.index]))
    torch.backends.cuda.matmul.allow_tf32 = False
    return {"framework": "pytorch", "torch": torch.__version__, "processes": world_size, "devices_per_process": 1,
            "device_type": "cuda", "workload": name, "title": title, "global_batch": global_batch,
            "warmup": warmup, "steps": steps, "median_ms": median_ms, "width": inputs}


def main():
    args = parse_arguments()
    if "LOCAL_RANK" not in os.environ:
        sys.exit("torch_ddp_bench: LOCAL_RANK is not set; launch it with torchrun --nproc_per_node N")
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print("torch_ddp_bench: torch is not installed; nothing to measure")
        return 0
    local_rank = int(os.environ["LOCAL_RANK"])
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    visible = torch.cuda.device_count()
    if visible == 0:
        print("torch_ddp_bench: no GPU visible; nothing to measure")
        return 0
    if local_world_size > visible:
        sys.exit(f"torch_ddp_bench: {local_world_size} processes on this machine but expected at most the "
                 f"{visible} GPUs visible")
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    lines = []
    for name in args.workloads:
        result = time_workload(torch, dist, name, args.steps, device, world_size)
        if rank == 0:
            lines.append(json.dumps(result))
            print(lines[-1], flush=True)
    dist.destroy_process_group()
    if rank == 0 and args.jsonl:
        with open(args.jsonl, "w", encoding="utf-8") as output:
            output.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

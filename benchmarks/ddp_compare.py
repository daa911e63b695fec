#!/usr/bin/env python3
"""Prints the multi-process data-parallel comparison of one benchmarks/ddp_suite.sh run as markdown.

Reads the JSON lines of ddp_step_bench (tandem) and torch_ddp_bench.py (PyTorch) written in the same run, and the
markdown table of nccl_mpi_allreduce (ProcessGroup::all_reduce beside raw NCCL), and prints:
  1. workload | tandem DDP ms | tandem captured ms | PyTorch DDP ms | ratio   (ratio = tandem's eager step / PyTorch:
     below 1, tandem is faster), one row per workload and process layout; the captured column is tandem's
     TrainingStep over the same DistributedDataParallel ("eager" after the figure when its steps could not replay);
     PyTorch's DDP has no process driving two GPUs, so those rows have tandem's figures alone;
  2. the all-reduce table as nccl_mpi_allreduce wrote it;
  3. the targets, each met, missed or not measured.
Nothing is typed in: a figure missing from the files (a run that failed) shows as "missing".

Usage: python3 benchmarks/ddp_compare.py --tandem FILE... --torch FILE [--allreduce FILE] [--markdown PATH]
"""
import argparse
import json
import os

WORKLOAD_TITLES = {"seed": "seed net, batch 4096", "wide": "wide MLP fp32, batch 8192",
                   "wide-tf32": "wide MLP TF32, batch 8192", "wide-bf16": "wide MLP bf16, batch 8192"}
# workload: the step that tandem's DDP (2 processes x 1 GPU) should reach, in milliseconds
STEP_TARGETS_MS = {"seed": 0.25, "wide": 30.5, "wide-tf32": 5.9}
# workloads whose target is PyTorch's DDP step of the same run (2 processes x 1 GPU): tandem must be faster
FASTER_THAN_TORCH = ("wide-bf16",)
ALL_REDUCE_TARGET_SIZE = "4 KB"
ALL_REDUCE_TARGET_US = 1.5  # tandem's all_reduce at 4 KB within this much of raw NCCL


def read_json_lines(path):
    """The JSON objects of the lines of `path` that hold one; a missing file has none."""
    if not path or not os.path.exists(path):
        return []
    records = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def layout(record):
    return record.get("processes"), record.get("devices_per_process")


def layout_label(processes, per_process):
    return (f"{processes} process{'es' if processes != 1 else ''} x {per_process} "
            f"GPU{'s' if per_process != 1 else ''}")


def cell(value, digits):
    return "missing" if value is None else f"{value:.{digits}f}"


def step_digits(ms):
    return 3 if ms is not None and ms < 10 else 1


def step_table(tandem, torch):
    steps = [r for r in tandem if "workload" in r and "median_ms" in r]
    torch_steps = {(r.get("workload"), layout(r)): r["median_ms"] for r in torch if "median_ms" in r}
    # the suite's two layouts always (a failed run shows as missing), and any other that was measured
    layouts = sorted({(2, 1), (1, 2)} | {layout(r) for r in steps}, key=lambda pair: (-(pair[0] or 0), pair[1] or 0))
    lines = ["| workload | tandem DDP ms | tandem captured ms | PyTorch DDP ms | ratio |", "|---|---|---|---|---|"]
    measured = {}
    for processes, per_process in layouts:
        for workload, title in WORKLOAD_TITLES.items():
            matches = [r for r in steps if r["workload"] == workload and layout(r) == (processes, per_process)]
            ours = matches[-1]["median_ms"] if matches else None
            captured = matches[-1].get("captured_median_ms") if matches else None
            captured_cell = cell(captured, step_digits(captured))
            if captured is not None and not matches[-1].get("captured_replayed", False):
                captured_cell += " (eager)"
            theirs = torch_steps.get((workload, (processes, per_process)))
            if theirs is None and processes == 1:
                torch_cell, ratio = "-", "-"  # PyTorch's DDP drives one GPU per process
            else:
                torch_cell = cell(theirs, step_digits(theirs))
                ratio = f"{ours / theirs:.2f}" if ours is not None and theirs else "-"
            lines.append(f"| {title}, {layout_label(processes, per_process)} | {cell(ours, step_digits(ours))} | "
                         f"{captured_cell} | {torch_cell} | {ratio} |")
            measured[(workload, processes, per_process)] = ours
    return lines, measured


def read_text(path):
    if not path or not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8", errors="replace") as text:
        return text.read()


def all_reduce_at(table, size):
    """(tandem us, raw NCCL us) in the row of `size` of nccl_mpi_allreduce's markdown table, by its column names."""
    columns = None
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "raw NCCL us" in cells and "tandem us" in cells:
            columns = cells
        elif columns and len(cells) == len(columns) and cells[0] == size:
            try:
                return float(cells[columns.index("tandem us")]), float(cells[columns.index("raw NCCL us")])
            except ValueError:
                return None, None
    return None, None


def torch_two_process_steps(torch):
    """workload: PyTorch's DDP step with 2 processes x 1 GPU, where measured."""
    return {r["workload"]: r["median_ms"] for r in torch
            if "median_ms" in r and "workload" in r and layout(r) == (2, 1)}


def target_lines(measured, torch_measured, all_reduce_table):
    lines = []
    for workload in WORKLOAD_TITLES:
        value = measured.get((workload, 2, 1))
        shown = "missing" if value is None else f"{cell(value, step_digits(value))} ms"
        if workload in FASTER_THAN_TORCH:
            target = torch_measured.get(workload)
            theirs = "(missing)" if target is None else f"{cell(target, step_digits(target))} ms"
            wanted = f"faster than PyTorch's {theirs}"
            met = value is not None and target is not None and value < target
            verdict = "not measured" if value is None or target is None else ("met" if met else "missed")
        else:
            target = STEP_TARGETS_MS[workload]
            wanted = f"<= {target} ms"
            verdict = "not measured" if value is None else ("met" if value <= target else "missed")
        lines.append(f"- {WORKLOAD_TITLES[workload]}, 2 processes x 1 GPU: {shown} (target {wanted}): {verdict}")
    mine, raw = all_reduce_at(all_reduce_table, ALL_REDUCE_TARGET_SIZE)
    if mine is None or raw is None:
        lines.append("- all_reduce 4 KB: not measured (no 4 KB row in nccl_mpi_allreduce's table)")
    else:
        verdict = "met" if mine - raw <= ALL_REDUCE_TARGET_US else "missed"
        lines.append(f"- all_reduce 4 KB: tandem {mine:.1f} us, raw NCCL {raw:.1f} us, {mine - raw:+.1f} us "
                     f"(target within {ALL_REDUCE_TARGET_US} us): {verdict}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tandem", nargs="+", default=[], help="ddp_step_bench JSON lines files")
    parser.add_argument("--torch", default="", help="torch_ddp_bench.py JSON lines file")
    parser.add_argument("--allreduce", default="", help="nccl_mpi_allreduce's markdown table")
    parser.add_argument("--markdown", default="", help="also write the tables to this file")
    args = parser.parse_args()

    tandem = [record for path in args.tandem for record in read_json_lines(path)]
    torch = read_json_lines(args.torch)
    all_reduce_table = read_text(args.allreduce).strip()

    versions = sorted({r["torch"] for r in torch if "torch" in r})
    steps, measured = step_table(tandem, torch)
    text = ["Milliseconds per training step, median, rank 0 (PyTorch " + (", ".join(versions) or "not measured") +
            ", same run); ratio = tandem / PyTorch", "", *steps, "",
            all_reduce_table or "All-reduce against raw NCCL: not measured (nccl_mpi_allreduce wrote no table)", "",
            "Targets:", *target_lines(measured, torch_two_process_steps(torch), all_reduce_table)]
    report = "\n".join(text) + "\n"
    print(report, end="")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as output:
            output.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

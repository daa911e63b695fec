#!/usr/bin/env python3
"""Draws one benchmarks/width_sweep.sh run: step time against model width for tandem eager, tandem captured and
PyTorch's DDP, as a markdown table and an SVG line chart.

Reads the JSON lines of `train_step_bench --widths` (tandem, one process driving every GPU, eager and captured) and
of `torch_ddp_bench.py --widths` (PyTorch DDP, one process per GPU) written in the same run. Nothing is typed in: a
width a run did not measure shows as "missing" and leaves a gap in its line.

Usage: python3 benchmarks/width_sweep.py --tandem FILE --torch FILE --svg PATH [--markdown PATH]
"""
import argparse
import json
import os
import sys

from svg_lines import write_line_chart


def read_json_lines(path):
    """The JSON objects of the lines of `path` that hold one; a missing file has none."""
    if not os.path.exists(path):
        return []
    records = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            line = line.strip()
            if line.startswith("{"):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("width"), int):
                    records.append(record)
    return records


def series_of(tandem, torch):
    """{series name: {width: median ms}}."""
    series = {}
    for record in tandem:
        gpus = record.get("devices")
        name = f"tandem {record.get('mode')} ({gpus} GPUs, 1 process)"
        series.setdefault(name, {})[record["width"]] = record["median_ms"]
    for record in torch:
        name = f"PyTorch DDP ({record.get('processes')} processes x 1 GPU)"
        series.setdefault(name, {})[record["width"]] = record["median_ms"]
    return series


def markdown(series):
    widths = sorted({width for values in series.values() for width in values})
    names = list(series)
    rows = ["| width | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for width in widths:
        cells = []
        for name in names:
            ms = series[name].get(width)
            cells.append("missing" if ms is None else (f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"))
        rows.append(f"| {width} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tandem", required=True)
    parser.add_argument("--torch", required=True)
    parser.add_argument("--svg", required=True)
    parser.add_argument("--markdown", default="")
    args = parser.parse_args()
    series = series_of(read_json_lines(args.tandem), read_json_lines(args.torch))
    if not series:
        sys.exit("width_sweep: neither file holds a measured width")
    table = markdown(series)
    print("Milliseconds per training step, 4 x Linear(width) with ReLU between, global batch 8192, FP32 (median)\n")
    print(table)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as output:
            output.write(table)
    write_line_chart(args.svg, "Training step time against model width (4 x Linear(width), batch 8192, FP32)",
                     "width", "milliseconds per step",
                     {name: sorted(values.items()) for name, values in series.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

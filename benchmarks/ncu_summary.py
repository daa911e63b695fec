#!/usr/bin/env python3
"""Kernel time by kernel family from an ncu CSV (--metrics gpu__time_duration.sum --csv).

    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \
        build-gpu/bin/gpt_bench --profile eager --steps 1 > step.csv
    python3 benchmarks/ncu_summary.py step.csv [--top 25]

Prints one row per kernel family (the name up to its template arguments or parameter list, with the functor of
tandem's dependent_kernel<...> wrapper kept), with launches, total microseconds and share of the total.
"""
import argparse
import csv
import re
import sys
from collections import defaultdict


def without_namespaces(name: str) -> str:
    return re.sub(r"(?:\w+|<unnamed>|\(anonymous namespace\))::", "", name)


def family(name: str) -> str:
    # tandem's launches are dependent_kernel<&body<first template argument...>, parameters...>: name them by the body
    body = re.search(r"dependent_kernel<&([^,]*)", name)
    if body:
        text = without_namespaces(body.group(1))
        return text + ">" * (text.count("<") - text.count(">"))
    return without_namespaces(re.split(r"[<(]", name.replace("void ", "", 1), maxsplit=1)[0].strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv_file")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with open(args.csv_file, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        print("no ncu CSV header (a line starting with \"ID\") in", args.csv_file, file=sys.stderr)
        return 1
    time_ns = defaultdict(float)
    launches = defaultdict(int)
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        key = family(row["Kernel Name"])
        value = float(row["Metric Value"].replace(",", ""))
        scale = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6}.get(row.get("Metric Unit", "nsecond"), 1.0)
        time_ns[key] += value * scale
        launches[key] += 1
    total = sum(time_ns.values())
    print(f"{'kernel family':<60} {'launches':>8} {'us':>10} {'share':>7}")
    for key, ns in sorted(time_ns.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{key[:60]:<60} {launches[key]:>8} {ns / 1e3:>10.1f} {100 * ns / total:>6.1f}%")
    print(f"{'total':<60} {sum(launches.values()):>8} {total / 1e3:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

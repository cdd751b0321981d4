#!/usr/bin/python3
"""Markdown tables for docs/performance.md from the Google Benchmark JSON files of
measure_all.sh: medians of the repetitions, one column pair per file (e.g. 1 and 2 threads).

    /usr/bin/python3 benchmarks/sweep/tables.py docs/sweep/model_omp1.json docs/sweep/model_omp2.json
"""

import json
import os
import sys


def medians(path):
    with open(path) as f:
        report = json.load(f)
    out = {}
    for b in report["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b["run_name"].replace("/real_time", "")
        out[name] = b
    return out


def label(path):
    return os.path.splitext(os.path.basename(path))[0]


def main():
    files = sys.argv[1:]
    if not files:
        sys.exit(__doc__)
    data = [medians(p) for p in files]
    names = list(data[0].keys())
    has_flops = any("GFLOP/s" in b for b in data[0].values())
    header = "| benchmark |"
    for p in files:
        header += f" {label(p)} time |" + (f" {label(p)} GFLOP/s |" if has_flops else f" {label(p)} items/s |")
    print(header)
    print("|---" * (1 + 2 * len(files)) + "|")
    for n in names:
        row = f"| {n} |"
        for d in data:
            b = d.get(n)
            if b is None:
                row += " - | - |"
                continue
            row += f" {b['real_time']:.3g} {b['time_unit']} |"
            if has_flops:
                row += f" {b.get('GFLOP/s', float('nan')):.1f} |"
            else:
                row += f" {b.get('items_per_second', float('nan')):.3g} |"
        print(row)


if __name__ == "__main__":
    main()

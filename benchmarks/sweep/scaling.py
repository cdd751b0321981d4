#!/usr/bin/python3
"""Two-thread speed-up of the kernels, with the machine's own two-core capacity measured
around every run.

On a shared VM the second vCPU is sometimes worth much less than a core (dpk-core-probe has
seen two busy threads get one core's compute). A 2-thread timing taken then says nothing about
the code. This script runs, for --rounds rounds and for each benchmark of --bench matching
--filter (each in its own processes): dpk-core-probe, the benchmark at 1 thread, the probe, the
benchmark at 2 threads, the probe. It prints, per benchmark, the best and median 1- and 2-thread
times over the rounds, the speed-ups of the best times (what the code does on an undisturbed
machine) and of the medians, and the median speed-up over the "two-core" rounds only (all three
probes gave pair/alone >= --min-pair, default 1.9, and a one-core rate within 10 % of the best
seen); every round goes to --csv.

    /usr/bin/python3 benchmarks/sweep/scaling.py --bench build/perf/benchmarks/bench_descriptor \\
        --filter '/1/' --rounds 5 --csv docs/sweep/scaling_descriptor.csv
"""

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIND = {"OMP_PROC_BIND": "spread", "OMP_PLACES": "threads", "OPENBLAS_NUM_THREADS": "1"}


def probe(path):
    """(one-core GFLOP/s, pair/alone) of dpk-core-probe."""
    out = subprocess.run([path], capture_output=True, text=True, check=True).stdout
    match = re.search(r"alone ([0-9.]+) GFLOP/s.*pair/alone ([0-9.]+)", out)
    if not match:
        sys.exit(f"scaling.py: unexpected output of {path}: {out!r}")
    return float(match.group(1)), float(match.group(2))


def run_bench(path, name_filter, threads, min_time):
    """{benchmark name: real time in microseconds} of one process at `threads` threads."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), **BIND)
    out = subprocess.run([path, f"--benchmark_filter={name_filter}", f"--benchmark_min_time={min_time}",
                          "--benchmark_format=json"], capture_output=True, text=True, env=env, check=True).stdout
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
    return {b["name"]: b["real_time"] * scale[b["time_unit"]] for b in json.loads(out)["benchmarks"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", required=True, help="Google Benchmark program (e.g. bench_descriptor)")
    parser.add_argument("--probe", default=None, help="dpk-core-probe (default: next to --bench)")
    parser.add_argument("--filter", default=".", help="--benchmark_filter regex")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-time", default="0.3", help="--benchmark_min_time per run (seconds)")
    parser.add_argument("--min-pair", type=float, default=1.9, help="probe pair/alone for a two-core round")
    parser.add_argument("--csv", default=None)
    args = parser.parse_args()
    probe_path = args.probe or os.path.join(os.path.dirname(os.path.abspath(args.bench)), "dpk-core-probe")
    for path in (args.bench, probe_path):
        if not os.access(path, os.X_OK):
            sys.exit(f"scaling.py: {path} is not an executable (build the benchmarks first)")

    names = list(run_bench(args.bench, args.filter, 1, "0.01"))
    rows = []
    for r in range(args.rounds):
        for name in names:
            exact = "^" + re.escape(name) + "$"
            p0 = probe(probe_path)
            one = run_bench(args.bench, exact, 1, args.min_time)[name]
            p1 = probe(probe_path)
            two = run_bench(args.bench, exact, 2, args.min_time)[name]
            p2 = probe(probe_path)
            rows.append({"round": r, "benchmark": name, "us_1": one, "us_2": two,
                         "alone_min": min(p[0] for p in (p0, p1, p2)), "pair_min": min(p[1] for p in (p0, p1, p2))})
        print(f"round {r} done; probe pair/alone min {min(x['pair_min'] for x in rows if x['round'] == r):.2f}",
              file=sys.stderr)
    best_alone = max(x["alone_min"] for x in rows)

    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            writer.writeheader()
            writer.writerows(rows)

    def ratio(t1, t2):
        return f"{t1 / t2:.2f}x"

    print("| benchmark | 1 thread, best / median (us) | 2 threads, best / median (us) | speed-up, best | "
          "speed-up, median | two-core rounds: speed-up, median |")
    print("|---|---|---|---|---|---|")
    for name in dict.fromkeys(x["benchmark"] for x in rows):
        mine = [x for x in rows if x["benchmark"] == name]
        good = [x for x in mine if x["pair_min"] >= args.min_pair and x["alone_min"] >= 0.9 * best_alone]
        t1 = [x["us_1"] for x in mine]
        t2 = [x["us_2"] for x in mine]
        filtered = "-"
        if good:
            filtered = ratio(statistics.median(x["us_1"] for x in good), statistics.median(x["us_2"] for x in good))
        print(f"| {name} | {min(t1):.1f} / {statistics.median(t1):.1f} | {min(t2):.1f} / {statistics.median(t2):.1f} | "
              f"{ratio(min(t1), min(t2))} | {ratio(statistics.median(t1), statistics.median(t2))} | "
              f"{filtered} ({len(good)}/{len(mine)}) |")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""BLAS threads inside Kokkos threads: bench_model under every combination of
OMP_NUM_THREADS (Kokkos) x OPENBLAS_NUM_THREADS x OMP_PROC_BIND/OMP_PLACES x OMP_WAIT_POLICY.

Runs `bench_model --benchmark_filter=FILTER` once per combination (median of --repetitions),
writes a CSV (one row per combination and benchmark) and prints a Markdown table of ms per call.

    /usr/bin/python3 benchmarks/sweep/threads_study.py --csv docs/sweep/threads.csv
    /usr/bin/python3 benchmarks/sweep/threads_study.py --filter 'forward_forces' --kokkos-threads 2

"unset" means the variable is removed from the environment (OpenBLAS then takes
OMP_NUM_THREADS threads; libgomp binds nothing and spins for a while before sleeping).
See docs/tuning.md.
"""

import argparse
import csv
import glob
import itertools
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_bench():
    for c in [os.path.join(ROOT, "build", "perf", "benchmarks", "bench_model")] + sorted(
            glob.glob(os.path.join(ROOT, "build", "*", "benchmarks", "bench_model"))):
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bench", default=find_bench())
    p.add_argument("--filter", default="training_gradient")
    p.add_argument("--kokkos-threads", nargs="+", default=["1", "2"])
    p.add_argument("--blas-threads", nargs="+", default=["1", "2"])
    p.add_argument("--bind", nargs="+", default=["unset", "spread"], help="unset, or OMP_PROC_BIND with OMP_PLACES=threads")
    p.add_argument("--wait", nargs="+", default=["unset", "passive", "active"])
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--min-time", default="0.3")
    p.add_argument("--csv", default="threads.csv")
    args = p.parse_args()
    if not args.bench:
        sys.exit("threads_study: no bench_model under build/; build it or pass --bench")

    rows = []
    start = time.time()
    combos = list(itertools.product(args.kokkos_threads, args.blas_threads, args.bind, args.wait))
    for omp, blas, bind, wait in combos:
        env = dict(os.environ)
        for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES",
                    "OMP_WAIT_POLICY"):
            env.pop(key, None)
        env["OMP_NUM_THREADS"] = omp
        if blas != "unset":
            env["OPENBLAS_NUM_THREADS"] = blas
        if bind != "unset":
            env["OMP_PROC_BIND"] = bind
            env["OMP_PLACES"] = "threads"
        if wait != "unset":
            env["OMP_WAIT_POLICY"] = wait
        load = load_average()
        json_path = args.csv + ".tmp.json"
        out = subprocess.run([args.bench, f"--benchmark_filter={args.filter}", f"--benchmark_min_time={args.min_time}",
                              f"--benchmark_repetitions={args.repetitions}", "--benchmark_report_aggregates_only=true",
                              f"--benchmark_out={json_path}", "--benchmark_out_format=json"],
                             env=env, capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stdout + out.stderr, file=sys.stderr)
            sys.exit(f"threads_study: {args.bench} failed")
        with open(json_path) as f:
            report = json.load(f)
        os.remove(json_path)
        for b in report["benchmarks"]:
            if b.get("aggregate_name") != "median":
                continue
            name = b["run_name"].replace("/real_time", "")
            rows.append(dict(benchmark=name, omp_threads=omp, blas_threads=blas, proc_bind=bind, wait_policy=wait,
                             ms=round(b["real_time"], 3), gflops=round(b.get("GFLOP/s", 0.0), 2),
                             load_before=load))
        print(f"OMP {omp} BLAS {blas:5} bind {bind:6} wait {wait:7}: " +
              "  ".join(f"{r['benchmark'].split('/', 1)[1]} {r['ms']:.1f}" for r in rows
                        if (r['omp_threads'], r['blas_threads'], r['proc_bind'], r['wait_policy']) == (omp, blas, bind, wait)) +
              f"   load {load:.2f}", flush=True)
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    names = sorted({r["benchmark"] for r in rows}, key=lambda n: [r["benchmark"] for r in rows].index(n))
    print(f"\n{len(combos)} combinations in {time.time() - start:.0f} s; wrote {args.csv}\n")
    print("| OMP | BLAS | bind | wait | " + " | ".join(n.split("/", 1)[1] for n in names) + " |")
    print("|---" * (4 + len(names)) + "|")
    for omp, blas, bind, wait in combos:
        cells = []
        for n in names:
            match = [r for r in rows if (r["benchmark"], r["omp_threads"], r["blas_threads"], r["proc_bind"],
                                         r["wait_policy"]) == (n, omp, blas, bind, wait)]
            cells.append(f"{match[0]['ms']:.1f}" if match else "-")
        print(f"| {omp} | {blas} | {bind} | {wait} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

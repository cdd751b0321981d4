#!/usr/bin/python3
"""Precision x type_one_side x (MPI ranks x OpenMP threads) sweep of short dpk-train runs.

For one input.json (default: the water example) every cell runs
`dpk-train train <copy> --stop-at STEPS --timing-file ...` in a fresh folder, on a copy of the
input with descriptor/fitting_net precision and type_one_side set, absolute system paths,
disp_freq = STEPS (so the last step writes an lcurve line with validation) and no intermediate
checkpoints. Per cell it records: ms/step (median of the per-step update times after WARMUP
steps, from --timing-file), steps/s, frames/s (ranks x batch frames per step), the time of the
final lcurve/validation line, peak resident memory per rank (/usr/bin/time), and the
validation rmse_e/rmse_f of the last lcurve.out line. Writes a CSV and a PNG heat-map and
prints the best setting (highest frames/s; also the lowest ms/step).

    /usr/bin/python3 benchmarks/sweep/sweep.py                      # water, all cores
    /usr/bin/python3 benchmarks/sweep/sweep.py --steps 40 --csv s.csv --png s.png
    /usr/bin/python3 benchmarks/sweep/sweep.py --dry-run            # list the cells only

Ranks > 1 run under `mpirun --allow-run-as-root --oversubscribe -np R` with one core set of T
cores per rank; every cell exports OMP_NUM_THREADS=T OMP_PROC_BIND=spread OMP_PLACES=threads.
See docs/performance.md ("Sweep") and docs/tuning.md.
"""

import argparse
import csv
import glob
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_trainer():
    """The first dpk-train under build/ (build/perf first), or None."""
    candidates = [os.path.join(ROOT, "build", "perf", "examples", "trainer", "dpk-train")]
    candidates += sorted(glob.glob(os.path.join(ROOT, "build", "*", "examples", "trainer", "dpk-train")))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def splits(cores):
    """(ranks, threads) cells: 1x1 and every R x T with R * T == cores."""
    cells = [(1, 1)]
    for r in range(1, cores + 1):
        if cores % r == 0 and (r, cores // r) not in cells:
            cells.append((r, cores // r))
    return cells


def absolute_systems(systems, folder):
    if isinstance(systems, str):
        return systems if os.path.isabs(systems) else os.path.normpath(os.path.join(folder, systems))
    return [absolute_systems(s, folder) for s in systems]


def first_system(systems):
    return systems if isinstance(systems, str) else systems[0]


def batch_frames(data, natoms):
    """Frames per batch of the first system (int, "auto", "auto:N", or a list)."""
    b = data.get("batch_size", "auto")
    if isinstance(b, list):
        b = b[0]
    if isinstance(b, int):
        return b
    rule = 32
    if isinstance(b, str) and b.startswith("auto:"):
        rule = int(b.split(":")[1])
    return max(1, math.ceil(rule / natoms))


def atoms_of(system):
    path = os.path.join(system, "type.raw")
    with open(path) as f:
        return len(f.read().split())


def cell_input(base, folder, precision, type_one_side, steps):
    """The input of one cell (a modified deep copy of `base`)."""
    c = json.loads(json.dumps(base))
    model = c["model"]
    model["descriptor"]["precision"] = precision
    model["descriptor"]["type_one_side"] = type_one_side
    model.setdefault("fitting_net", {})["precision"] = precision
    t = c["training"]
    t["training_data"]["systems"] = absolute_systems(t["training_data"]["systems"], folder)
    if "validation_data" in t:
        t["validation_data"]["systems"] = absolute_systems(t["validation_data"]["systems"], folder)
    t["disp_freq"] = steps
    t["save_freq"] = 10 * steps + 1000  # only the final checkpoint
    t["numb_steps"] = max(int(t.get("numb_steps", steps)), steps)
    return c


def last_lcurve(path):
    """Column name -> value of the last data line of lcurve.out."""
    header, last = None, None
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                header = line[1:].split()
            elif line.strip():
                last = line.split()
    if header is None or last is None:
        return {}
    return {name: float(value) for name, value in zip(header, last)}


def read_timing(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            step, update, display, save = line.split()[:4]  # then per-region seconds, deep copies
            rows.append((int(step), float(update), float(display), float(save)))
    return rows


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run_cell(args, base, folder, precision, tos, ranks, threads, batch):
    name = f"{precision}_tos{int(tos)}_{ranks}x{threads}"
    out = os.path.join(args.work_dir, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    input_path = os.path.join(out, "input.json")
    with open(input_path, "w") as f:
        json.dump(cell_input(base, folder, precision, tos, args.steps), f, indent=2)
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="spread", OMP_PLACES="threads")
    env.update(args.env)
    timing = os.path.join(out, "timing.txt")
    train = [args.dpk_train, "train", input_path, "--stop-at", str(args.steps), "-o", out, "--timing-file", timing]
    rss = os.path.join(out, "rss")
    if ranks == 1:
        command = ["/usr/bin/time", "-f", "%M", "-o", rss + ".0"] + train
    else:
        binding = ["--bind-to", "core"] + (["--map-by", f"slot:PE={threads}"] if threads > 1 else [])
        exports = []
        for key in ["OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES"] + list(args.env):
            exports += ["-x", key]
        wrapped = 'exec /usr/bin/time -f %M -o "$0.$OMPI_COMM_WORLD_RANK" "$@"'
        command = ([args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] + binding + exports +
                   ["sh", "-c", wrapped, rss] + train)
    load_before = load_average()
    start = time.time()
    with open(os.path.join(out, "log.txt"), "w") as log:
        log.write("# " + " ".join(command) + "\n")
        log.flush()
        result = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=args.cell_timeout)
    wall = time.time() - start
    row = dict(precision=precision, type_one_side=tos, ranks=ranks, threads=threads, cores=ranks * threads,
               frames_per_step=ranks * batch, load_before=load_before, wall_s=round(wall, 2),
               status="ok" if result.returncode == 0 else f"exit {result.returncode}")
    if result.returncode != 0 or not os.path.exists(timing):
        return row
    steps = read_timing(timing)
    timed = [u for (s, u, d, v) in steps if s > args.warmup] or [u for (s, u, d, v) in steps]
    ms = 1e3 * statistics.median(timed)
    row.update(ms_per_step=round(ms, 2), ms_per_step_min=round(1e3 * min(timed), 2),
               steps_per_s=round(1e3 / ms, 3), frames_per_s=round(1e3 / ms * ranks * batch, 3),
               validation_ms=round(1e3 * steps[-1][2], 1))
    peaks = []
    for r in range(ranks):
        try:
            with open(f"{rss}.{r}") as f:
                peaks.append(int(f.read().strip().splitlines()[-1]) / 1024.0)
        except (OSError, ValueError, IndexError):
            pass
    if peaks:
        row.update(peak_rss_mb_per_rank=round(max(peaks), 1), peak_rss_mb_total=round(sum(peaks), 1))
    with open(os.path.join(out, "log.txt")) as f:
        for line in f:
            if "GFLOP/step per rank" in line:
                gflop = float(line.split(" GFLOP/step per rank")[0].split()[-1])
                row.update(gflop_per_step=round(gflop * ranks, 3), gflops=round(gflop * ranks / (ms * 1e-3), 1))
    curve = last_lcurve(os.path.join(out, "lcurve.out"))
    for key in ("rmse_e_val", "rmse_f_val", "rmse_e_trn", "rmse_f_trn"):
        if key in curve:
            row[key] = curve[key]
    return row


FIELDS = ["precision", "type_one_side", "ranks", "threads", "cores", "frames_per_step", "ms_per_step",
          "ms_per_step_min", "steps_per_s", "frames_per_s", "gflop_per_step", "gflops", "validation_ms", "peak_rss_mb_per_rank",
          "peak_rss_mb_total", "rmse_e_val", "rmse_f_val", "rmse_e_trn", "rmse_f_trn", "wall_s", "load_before",
          "status"]


def plot(rows, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    row_keys = sorted({(r["precision"], r["type_one_side"]) for r in rows}, key=lambda k: (k[0], not k[1]))
    col_keys = sorted({(r["ranks"], r["threads"]) for r in rows}, key=lambda k: (k[0] * k[1], k[0]))
    panels = [("ms_per_step", "ms / step (median)", "viridis_r"), ("frames_per_s", "frames / s", "viridis")]
    fig, axes = plt.subplots(1, 2, figsize=(4.2 + 1.5 * len(col_keys) * 2, 1.2 + 0.7 * len(row_keys)))
    for ax, (key, label, cmap) in zip(axes, panels):
        grid = np.full((len(row_keys), len(col_keys)), np.nan)
        for r in rows:
            if key in r:
                grid[row_keys.index((r["precision"], r["type_one_side"])),
                     col_keys.index((r["ranks"], r["threads"]))] = r[key]
        image = ax.imshow(grid, cmap=cmap, aspect="auto")
        for i in range(grid.shape[0]):
            for j in range(grid.shape[1]):
                if not np.isnan(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.3g}", ha="center", va="center", color="white", fontsize=9,
                            bbox=dict(facecolor="black", alpha=0.35, lw=0, pad=1))
        ax.set_xticks(range(len(col_keys)), [f"{r} rank x {t} thr" for r, t in col_keys], fontsize=8)
        ax.set_yticks(range(len(row_keys)), [f"{p}, tos={str(t).lower()}" for p, t in row_keys], fontsize=8)
        ax.set_title(label, fontsize=10)
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input", default=os.path.join(ROOT, "examples", "water", "se_e2_a", "input.json"))
    parser.add_argument("--dpk-train", default=find_trainer(), help="dpk-train executable (default: build/*/)")
    parser.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="cores to split (default: all)")
    parser.add_argument("--steps", type=int, default=60, help="training steps per cell")
    parser.add_argument("--warmup", type=int, default=10, help="steps left out of the median")
    parser.add_argument("--precisions", nargs="+", default=["float64", "float32"])
    parser.add_argument("--type-one-side", nargs="+", default=["true", "false"], choices=["true", "false"])
    parser.add_argument("--splits", nargs="+", help="cells as RxT (default: 1x1 and every split of --cores)")
    parser.add_argument("--env", nargs="*", default=[], help="extra KEY=VALUE for every run")
    parser.add_argument("--work-dir", default=os.path.join(ROOT, "build", "sweep"), help="one folder per cell")
    parser.add_argument("--csv", default="sweep.csv")
    parser.add_argument("--png", default="sweep.png")
    parser.add_argument("--cell-timeout", type=float, default=300)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    args.env = dict(e.split("=", 1) for e in args.env)
    if not args.dpk_train:
        sys.exit("sweep: no dpk-train found under build/; build it or pass --dpk-train")
    if args.warmup >= args.steps:
        sys.exit("sweep: --warmup must be smaller than --steps")

    with open(args.input) as f:
        base = json.load(f)
    folder = os.path.dirname(os.path.abspath(args.input))
    systems = absolute_systems(base["training"]["training_data"]["systems"], folder)
    batch = batch_frames(base["training"]["training_data"], atoms_of(first_system(systems)))
    cells_rt = ([tuple(int(x) for x in s.split("x")) for s in args.splits] if args.splits else splits(args.cores))
    cells = [(p, t == "true", r, th) for p in args.precisions for t in args.type_one_side for (r, th) in cells_rt]
    print(f"sweep: {len(cells)} cells, {args.steps} steps each (median after {args.warmup}), "
          f"batch {batch} frame(s) per rank, dpk-train {args.dpk_train}", flush=True)
    if args.dry_run:
        for c in cells:
            print(f"  {c[0]} type_one_side={str(c[1]).lower()} {c[2]} rank(s) x {c[3]} thread(s)")
        return

    os.makedirs(args.work_dir, exist_ok=True)
    start = time.time()
    rows = []
    for precision, tos, ranks, threads in cells:
        row = run_cell(args, base, folder, precision, tos, ranks, threads, batch)
        rows.append(row)
        print(f"  {precision} tos={str(tos).lower():5} {ranks}x{threads}: "
              f"{row.get('ms_per_step', float('nan')):8.2f} ms/step  {row.get('frames_per_s', float('nan')):6.2f} "
              f"frames/s  {row.get('gflops', float('nan')):5.1f} GFLOP/s  rss {row.get('peak_rss_mb_per_rank', float('nan')):6.1f} MB/rank  "
              f"val {row.get('validation_ms', float('nan')):6.1f} ms  rmse_e {row.get('rmse_e_val', float('nan')):.3g} "
              f"rmse_f {row.get('rmse_f_val', float('nan')):.3g}  load {row['load_before']:.2f}  {row['status']}",
              flush=True)
    total = time.time() - start

    with open(args.csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow(r)
    good = [r for r in rows if "frames_per_s" in r]
    title = (f"dpk-train sweep: {os.path.relpath(args.input, ROOT)}, {args.steps} steps/cell, "
             f"{args.cores} cores, batch {batch}/rank")
    if good:
        plot(good, args.png, title)
    print(f"sweep: {len(rows)} cells in {total:.0f} s; wrote {args.csv} and {args.png}")
    if not good:
        sys.exit("sweep: every cell failed (see the log.txt files under " + args.work_dir + ")")
    best = max(good, key=lambda r: r["frames_per_s"])
    fastest = min(good, key=lambda r: r["ms_per_step"])

    def describe(r):
        return (f"precision {r['precision']}, type_one_side {str(r['type_one_side']).lower()}, {r['ranks']} rank(s) x "
                f"{r['threads']} thread(s): {r['ms_per_step']} ms/step, {r['frames_per_s']} frames/s")

    print("best throughput: " + describe(best))
    print("best step time:  " + describe(fastest))
    for p in args.precisions:
        per = [r for r in good if r["precision"] == p]
        if per:
            print(f"best {p}: " + describe(max(per, key=lambda r: r["frames_per_s"])))
    print("export OMP_NUM_THREADS={} OMP_PROC_BIND=spread OMP_PLACES=threads{}".format(
        best["threads"], f"; mpirun -np {best['ranks']} ..." if best["ranks"] > 1 else ""))


if __name__ == "__main__":
    main()

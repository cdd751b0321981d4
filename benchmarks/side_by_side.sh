#!/usr/bin/env bash
# Training step of dpk vs DeePMD-kit (TensorFlow and PyTorch backends), side by side in one run,
# on DeePMD-kit's water example (examples/water/se_e2_a/input.json, batch 1). Installs nothing:
# DeePMD-kit comes from a venv given with --venv (recipe in docs/performance.md:
#   python3 -m venv /opt/dpk-venv && /opt/dpk-venv/bin/pip install deepmd-kit==3.2.0 tensorflow-cpu
#   and for the PyTorch backend: /opt/dpk-venv/bin/pip install torch==2.11.0 mpich e3nn).
#
#   benchmarks/side_by_side.sh [--venv DIR] [--dpk-train PATH] [--threads "1 2"]
#       [--precision "float64 float32"] [--backends "dpk tf pt"] [--steps "50 250"]
#       [--repeats 1] [--in-run K] [--busy CORE | --busy-pairs CORE] [--bench-gemm PATH] [--out DIR]
#
# Per step = (run of the larger step count - run of the smaller) / (difference), so start-up,
# statistics and the final model cancel; CPU = user + sys of the process tree (/usr/bin/time),
# wall = elapsed. --in-run K: one run per setting instead (the larger count + K steps, lcurve.out
# every K steps), timed at its lcurve.out lines of the two step counts (benchmarks/
# lcurve_sampler.py: CPU of the process tree and wall time when each line appears), so that
# per step = (time at the line of the larger count - time at the smaller) / (difference): no
# pairing of two runs whose start-ups differ on a shared machine; the window holds one
# validation line per K steps, for every backend alike. Each repeat runs every (precision,
# threads, backend) once, the thread counts and backends one after the other, so that a slow
# spell of a shared machine hits all of them alike; the table gives medians over the repeats, and
# the wall-time speed-up from the fewest to the most threads is the median of each repeat's own
# ratio. Threads: OMP_NUM_THREADS and DeePMD-kit's
# DP_INTRA_OP_PARALLELISM_THREADS = T, DP_INTER_OP_PARALLELISM_THREADS = 1, OPENBLAS_NUM_THREADS
# = 1 for DeePMD-kit (dpk-train sets its own BLAS default); dpk-train keeps its thread binding
# defaults (docs/tuning.md). Without --venv, or when a backend does not import, that backend is
# skipped with a message. Prints one markdown table row per (backend, threads, precision) and
# writes the raw timings to OUT/timings.tsv (default out/side_by_side). --busy CORE keeps a
# competing busy loop pinned to core CORE (taskset) during every run: the "busy node" case of
# docs/tuning.md (another job on one of the cores). --busy-pairs CORE runs every setting twice in
# each repeat, quiet and then with that busy loop, and prints each backend's busy/quiet ratio of
# wall per step (median of the repeats' own ratios), so both loads are measured in the same hour.
# --bench-gemm PATH (dpk's bench_gemm) measures
# the machine's GEMM rate (n = 2000 square, at each thread count, in each repeat, next to the
# runs) and prints dpk's rate over the whole step (dpk-train's GFLOP per step / wall per step) as
# a fraction of it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV="" DPK_TRAIN="$ROOT/build/openmp/examples/trainer/dpk-train" THREADS="1" PRECISIONS="float64 float32"
BACKENDS="dpk tf pt" STEPS="50 250" REPEATS=1 OUT="$ROOT/out/side_by_side" BUSY="" LOADS="quiet" BENCH_GEMM=""
IN_RUN=""
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) VENV="$2"; shift 2 ;;
    --dpk-train) DPK_TRAIN="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --precision) PRECISIONS="$2"; shift 2 ;;
    --backends) BACKENDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --in-run) IN_RUN="$2"; shift 2 ;;
    --busy) BUSY="$2"; LOADS="busy"; shift 2 ;;
    --busy-pairs) BUSY="$2"; LOADS="quiet busy"; shift 2 ;;
    --bench-gemm) BENCH_GEMM="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "side_by_side.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
read -r N1 N2 <<<"$STEPS"
case "$N1$N2" in ''|*[!0-9]*) echo "side_by_side.sh: --steps needs two step counts, got '$STEPS'" >&2; exit 2 ;; esac
[ "$N2" -gt "$N1" ] || { echo "side_by_side.sh: --steps: the second count must be larger" >&2; exit 2; }
if [ -n "$IN_RUN" ]; then
  case "$IN_RUN" in ''|*[!0-9]*|0) echo "side_by_side.sh: --in-run needs a positive step count, got '$IN_RUN'" >&2; exit 2 ;; esac
  [ $((N1 % IN_RUN)) -eq 0 ] && [ $((N2 % IN_RUN)) -eq 0 ] || {
    echo "side_by_side.sh: --in-run $IN_RUN: both step counts ($N1, $N2) must be multiples of it (lcurve.out lines)" >&2; exit 2; }
fi
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }   # runs start in their own folders
DPK_TRAIN=$(absolute "$DPK_TRAIN")
if [ -n "$BENCH_GEMM" ]; then
  BENCH_GEMM=$(absolute "$BENCH_GEMM")
  [ -x "$BENCH_GEMM" ] || { echo "side_by_side.sh: --bench-gemm '$BENCH_GEMM' is not an executable (cmake --build build/openmp --target bench_gemm)" >&2; exit 2; }
fi
command -v /usr/bin/time >/dev/null || { echo "side_by_side.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }

# Which backends can run.
available=()
for b in $BACKENDS; do
  case "$b" in
    dpk) if [ -x "$DPK_TRAIN" ]; then available+=(dpk); else
           echo "side_by_side.sh: skipping dpk: '$DPK_TRAIN' is not built (cmake --build build/openmp --target dpk-train)" >&2; fi ;;
    tf|pt)
      module=tensorflow; [ "$b" = pt ] && module=torch
      if [ -n "$VENV" ] && [ -x "$VENV/bin/dp" ] && "$VENV/bin/python" -c "import $module" >/dev/null 2>&1; then
        available+=("$b")
      else
        echo "side_by_side.sh: skipping DeePMD-kit --$b: no venv with dp and $module (--venv DIR)" >&2
      fi ;;
    *) echo "side_by_side.sh: unknown backend '$b' (dpk, tf, pt)" >&2; exit 2 ;;
  esac
done
[ "${#available[@]}" -gt 0 ] || { echo "side_by_side.sh: no backend to run" >&2; exit 2; }

mkdir -p "$OUT"
TSV="$OUT/timings.tsv"
printf 'backend\tthreads\tprecision\trepeat\tsteps\twall_s\tcpu_s\tgflop_per_step\tload\n' >"$TSV"
GEMM_TSV="$OUT/gemm_rate.tsv"
printf 'threads\tprecision\trepeat\tgflops\n' >"$GEMM_TSV"

# write_input STEPS PRECISION FILE [DISP_FREQ]: input.json of the water example with absolute data
# paths, STEPS steps, PRECISION, an lcurve.out line every DISP_FREQ steps (default: at the end).
write_input() {
  python3 "$ROOT/benchmarks/water_input.py" "$ROOT/examples/water/se_e2_a/input.json" "$ROOT/examples/water/data" \
    "$1" "$3" "$2" ${4:+"$4"}
}

# run BACKEND THREADS PRECISION REPEAT STEPS LOAD: one training run, its times appended to the TSV
# (with --in-run: a run of STEPS + K steps, the times at its lines of steps N1 and N2 as two rows).
run() {
  local b="$1" t="$2" p="$3" r="$4" n="$5" load="$6" dir="$OUT/$1-t$2-$3-r$4-n$5-$6"
  rm -rf "$dir"; mkdir -p "$dir"
  if [ -n "$IN_RUN" ]; then write_input "$((n + IN_RUN))" "$p" "$dir/input.json" "$IN_RUN"
  else write_input "$n" "$p" "$dir/input.json"; fi
  local cmd=()
  case "$b" in
    dpk) cmd=("$DPK_TRAIN" train input.json) ;;
    tf) cmd=("$VENV/bin/dp" --tf train input.json) ;;
    pt) cmd=("$VENV/bin/dp" --pt train input.json) ;;
  esac
  if ! (cd "$dir" && env OMP_NUM_THREADS="$t" DP_INTRA_OP_PARALLELISM_THREADS="$t" DP_INTER_OP_PARALLELISM_THREADS=1 \
          $([ "$b" = dpk ] || echo OPENBLAS_NUM_THREADS=1) \
          $([ -n "$IN_RUN" ] && echo python3 "$ROOT/benchmarks/lcurve_sampler.py" lcurve.out samples.tsv --) \
          /usr/bin/time -f '%e %U %S' -o time.txt "${cmd[@]}" >log.txt 2>&1); then
    echo "side_by_side.sh: $b ($t threads, $p, $n steps) failed; last lines of $dir/log.txt:" >&2
    tail -5 "$dir/log.txt" >&2
    exit 1
  fi
  local gflop="-"   # the model's count that dpk-train prints ("... 2.2 GFLOP/step per rank")
  [ "$b" = dpk ] && gflop=$(sed -n 's/.* \([0-9.]*\) GFLOP\/step.*/\1/p' "$dir/log.txt" | tail -1)
  if [ -n "$IN_RUN" ]; then
    local s wall cpu
    for s in "$N1" "$N2"; do
      read -r wall cpu < <(awk -v s="$s" '$1 == s { print $2, $3; exit }' "$dir/samples.tsv")
      [ -n "${wall:-}" ] || { echo "side_by_side.sh: $b ($t threads, $p): no lcurve.out line of step $s in $dir/samples.tsv" >&2; exit 1; }
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$b" "$t" "$p" "$r" "$s" "$wall" "$cpu" "${gflop:--}" "$load" >>"$TSV"
    done
    return
  fi
  read -r wall user sys <"$dir/time.txt"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$b" "$t" "$p" "$r" "$n" "$wall" \
    "$(python3 -c "print(f'{$user + $sys:.2f}')")" "${gflop:--}" "$load" >>"$TSV"
}

# gemm_rate THREADS PRECISION REPEAT: the machine's GEMM rate now (bench_gemm, n = 2000, BLAS
# threads 1, the product split over THREADS Kokkos threads as dpk splits its own).
gemm_rate() {
  local scalar=double
  [ "$2" = float32 ] && scalar=float
  local out
  out=$(env OMP_NUM_THREADS="$1" OMP_PROC_BIND=spread OMP_PLACES=threads OPENBLAS_NUM_THREADS=1 \
        "$BENCH_GEMM" --benchmark_filter="^gemm<$scalar>/2000/2000/2000/1/" 2>&1) || {
    echo "side_by_side.sh: $BENCH_GEMM failed:" >&2; echo "$out" | tail -5 >&2; exit 1; }
  local rate
  rate=$(echo "$out" | sed -n 's/.*GFLOP\/s=\([0-9.]*\).*/\1/p' | head -1)
  [ -n "$rate" ] || { echo "side_by_side.sh: no GFLOP/s in the output of $BENCH_GEMM" >&2; exit 1; }
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$rate" >>"$GEMM_TSV"
}

# The competing busy loop pinned to core $BUSY: started before a busy run, stopped after it.
busy_pid=""
busy_start() {
  taskset -c "$BUSY" bash -c 'while :; do :; done' &
  busy_pid=$!
  sleep 1
  kill -0 "$busy_pid" 2>/dev/null || { echo "side_by_side.sh: busy loop on core $BUSY did not start" >&2; exit 2; }
}
busy_stop() {
  [ -z "$busy_pid" ] || { kill "$busy_pid" 2>/dev/null; wait "$busy_pid" 2>/dev/null; busy_pid=""; } || true
}
if [ -n "$BUSY" ]; then
  command -v taskset >/dev/null || { echo "side_by_side.sh: --busy needs taskset (util-linux)" >&2; exit 2; }
  trap busy_stop EXIT
  echo "side_by_side.sh: busy loop pinned to core $BUSY for the runs marked busy (loads: $LOADS)" >&2
fi
echo "side_by_side.sh: backends ${available[*]}, threads $THREADS, precision $PRECISIONS, steps $N1 and $N2, $REPEATS repeat(s); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq 1 "$REPEATS"); do
  for p in $PRECISIONS; do
    for t in $THREADS; do
      [ "$LOADS" = busy ] && busy_start   # --busy: the GEMM probe runs beside the loop too
      [ -n "$BENCH_GEMM" ] && gemm_rate "$t" "$p" "$r"
      for load in $LOADS; do
        [ "$load" = busy ] && [ -z "$busy_pid" ] && busy_start
        for b in "${available[@]}"; do
          if [ -n "$IN_RUN" ]; then
            run "$b" "$t" "$p" "$r" "$N2" "$load"   # both rows from one run
          else
            run "$b" "$t" "$p" "$r" "$N1" "$load"
            run "$b" "$t" "$p" "$r" "$N2" "$load"
          fi
        done
        busy_stop
      done
    done
  done
done
echo "side_by_side.sh: done; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# Table: medians over repeats of the per-step differences; ratio to dpk's CPU per step.
python3 - "$TSV" "$N1" "$N2" "$GEMM_TSV" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
n1, n2 = int(sys.argv[2]), int(sys.argv[3])
gemm = list(csv.DictReader(open(sys.argv[4]), delimiter="\t"))
runs = {}
for r in rows:
    load = r.get("load") or "quiet"   # timings from before the load column: quiet or --busy
    runs.setdefault((r["backend"], r["threads"], r["precision"], load, r["repeat"]), {})[int(r["steps"])] = r
per = {}   # (backend, threads, precision, load) -> {repeat: (wall ms, CPU ms, GFLOP per step)}
for (b, t, p, load, rep), by in runs.items():
    if n1 in by and n2 in by:
        d = n2 - n1
        wall = (float(by[n2]["wall_s"]) - float(by[n1]["wall_s"])) / d * 1e3
        cpu = (float(by[n2]["cpu_s"]) - float(by[n1]["cpu_s"])) / d * 1e3
        gflop = by[n2].get("gflop_per_step", "-")
        per.setdefault((b, t, p, load), {})[rep] = (wall, cpu, None if gflop in ("-", "", None) else float(gflop))
med = statistics.median
names = {"dpk": "dpk-train", "tf": "DeePMD-kit TF", "pt": "DeePMD-kit PyTorch"}


def paired(a, b, f):
    """f(a's entry, b's entry) for every repeat both have."""
    return [f(a[r], b[r]) for r in a if r in b]


def spread(v, form, unit=""):
    """'median<unit> (min-max)' of the values v in format `form`; '-' for none, no range for one."""
    if not v:
        return "-"
    text = (form % med(v)) + unit
    return text if len(v) == 1 else f"{text} ({form % min(v)}-{form % max(v)})"


reps = len({r["repeat"] for r in rows})
loads = sorted({k[3] for k in per}, key=["quiet", "busy"].index)
busy_column = loads != ["quiet"]   # a load column once any run had the busy loop beside it
print(f"CPU per step / dpk's: median over {reps} repeat(s) of each repeat's ratio (min-max)")
print("| threads | precision |" + (" load |" if busy_column else "") + " code | wall ms/step | CPU ms/step | CPU per step / dpk's |")
print("|---|---|" + ("---|" if busy_column else "") + "---|---|---|---|")
for (b, t, p, load) in sorted(per, key=lambda k: (int(k[1]), k[2], loads.index(k[3]), list(names).index(k[0]))):
    v = per[(b, t, p, load)]
    wall = med(w for w, _, _ in v.values())
    cpu = med(c for _, c, _ in v.values())
    ref = per.get(("dpk", t, p, load))
    ratio = spread(paired(v, ref, lambda x, y: x[1] / y[1]) if ref else [], "%.2f", "x")
    print(f"| {t} | {p} |" + (f" {load} |" if busy_column else "") + f" {names[b]} | {wall:.1f} | {cpu:.1f} | {ratio} |")

threads = sorted({int(k[1]) for k in per})
if len(threads) > 1:
    lo, hi = str(threads[0]), str(threads[-1])
    print(f"\nwall per step, {lo} -> {hi} threads: median over repeats of each repeat's ratio (min-max)")
    for (b, t, p, load) in sorted(per):
        if t == lo and (b, hi, p, load) in per:
            s = paired(per[(b, lo, p, load)], per[(b, hi, p, load)], lambda x, y: x[0] / y[0])
            if s:
                print(f"- {names[b]} {p}" + (f" {load}" if busy_column else "") + f": {spread(s, '%.2f', 'x')}")

if len(loads) > 1:
    print("\nbusy / quiet, same repeat (slow-down by the busy loop): median of each repeat's ratio (min-max)")
    print("| threads | precision | code | wall busy / quiet | CPU busy / quiet |")
    print("|---|---|---|---|---|")
    for (b, t, p, load) in sorted(per, key=lambda k: (int(k[1]), k[2], list(names).index(k[0]))):
        if load == "quiet" and (b, t, p, "busy") in per:
            q, y = per[(b, t, p, "quiet")], per[(b, t, p, "busy")]
            w = spread(paired(y, q, lambda x, z: x[0] / z[0]), "%.2f", "x")
            c = spread(paired(y, q, lambda x, z: x[1] / z[1]), "%.2f", "x")
            print(f"| {t} | {p} | {names[b]} | {w} | {c} |")

if gemm:
    rate = {}
    for g in gemm:
        rate.setdefault((g["threads"], g["precision"]), {})[g["repeat"]] = float(g["gflops"])
    print("\ndpk's rate over the whole step vs the machine's GEMM rate (bench_gemm n = 2000, same repeat)")
    print("| threads | precision | GEMM GFLOP/s | dpk GFLOP/s over the step | fraction |")
    print("|---|---|---|---|---|")
    for (t, p), by_rep in sorted(rate.items(), key=lambda k: (int(k[0][0]), k[0][1])):
        d = per.get(("dpk", t, p, loads[0]))   # the load the GEMM probe ran beside
        if not d:
            continue
        step_rate = {r: d[r][2] / d[r][0] * 1e3 for r in d if d[r][2]}   # GFLOP/s over the step
        frac = [100 * step_rate[r] / by_rep[r] for r in step_rate if r in by_rep]
        if frac:
            print(f"| {t} | {p} | {med(by_rep.values()):.1f} | {med(step_rate.values()):.1f} | "
                  f"{spread(frac, '%.0f', ' %')} |")
EOF

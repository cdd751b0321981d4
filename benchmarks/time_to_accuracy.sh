#!/usr/bin/env bash
# Time to accuracy, dpk vs DeePMD-kit's TensorFlow backend: each code trains an input.json (default
# DeePMD-kit's water example, examples/water/se_e2_a/input.json; --input for another, e.g.
# examples/eam/copper/input.json: its nets, loss and batch size, its training systems) for a whole
# schedule of N steps from its own initialisation, and DeePMD-kit's `dp --tf test` then measures
# both models on the input's first validation system (water: data_3, 80 frames; system paths are
# taken relative to the input's folder): dpk's model goes through `dpk-train export` and
# `dp convert-backend`, so one tool tests both; `dpk-train test` on dpk's own file is printed
# beside it. Installs nothing: DeePMD-kit comes from a venv (--venv, recipe in
# docs/performance.md); without one only dpk runs and tests itself.
#
#   benchmarks/time_to_accuracy.sh --venv DIR [--input FILE] [--dpk-train PATH] [--steps N] [--dpk-steps "N ..."]
#       [--precision "float64 float32"] [--schedule whole|input] [--seeds "1"] [--dpk-threads T]
#       [--tf-threads T] [--out DIR]
#
# The learning-rate schedule of an N-step run (numb_steps = N in both codes' input): `whole`
# (default) runs the input's start_lr -> stop_lr over the N steps with decay_steps = N / 50 (the
# water input's 5000 is meant for a million steps: DeePMD-kit would replace it by 100 in a 5000-step
# run and decay it only 4 times in a 20000-step one); `input` runs the first N steps of the input's
# own schedule (its decay_steps, and decay_rate = (stop_lr / start_lr)^(decay_steps / the input's
# numb_steps), which both codes then use as given), so runs of different lengths lie on one
# curve. The loss prefactors follow the learning rate in both. lcurve.out every N / 20 steps, one
# checkpoint at the end. --dpk-steps gives dpk other (e.g. longer) runs: "what does dpk reach in
# the time DeePMD-kit needs for N steps". Seeds: seed s sets
# the descriptor's and fitting net's seed to s and training.seed to s + 9 (s = 1: the input's own
# 1, 1, 10); the two codes draw different random numbers from the same seeds, so a seed is one
# sample of each code's training, not a paired run. Space seeds by 1000 or more (a warning says
# why: DeePMD-kit TF's models for close seeds share initial values). Threads: each code gets the machine alone
# (runs one after the other); defaults: dpk all cores (nproc), DeePMD-kit TF 1 intra-op thread
# (DP_INTRA_OP_PARALLELISM_THREADS, its fastest wall time per step on 2-core VMs in
# docs/performance.md's side-by-side tables), DP_INTER_OP_PARALLELISM_THREADS = 1 and
# OPENBLAS_NUM_THREADS = 1 for it. Times: /usr/bin/time of `train` (wall, user + sys of the process
# tree) and, for DeePMD-kit, of `dp freeze`, which its model needs before it can run anywhere.
# Writes OUT/results.tsv (default out/time_to_accuracy) and prints a markdown table: RMSEs of energy
# per atom, force and virial per atom (virial "-" where the validation system has no virial.npy).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV="" DPK_TRAIN="$ROOT/build/openmp/examples/trainer/dpk-train" STEPS=5000 DPK_STEPS="" PRECISIONS="float64 float32"
SEEDS="1" SCHEDULE=whole INPUT="$ROOT/examples/water/se_e2_a/input.json" DPK_THREADS=$(nproc) TF_THREADS=1 OUT="$ROOT/out/time_to_accuracy"
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) VENV="$2"; shift 2 ;;
    --dpk-train) DPK_TRAIN="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --dpk-steps) DPK_STEPS="$2"; shift 2 ;;
    --precision) PRECISIONS="$2"; shift 2 ;;
    --seeds) SEEDS="$2"; shift 2 ;;
    --dpk-threads) DPK_THREADS="$2"; shift 2 ;;
    --tf-threads) TF_THREADS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --schedule) SCHEDULE="$2"; shift 2 ;;
    --input) INPUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "time_to_accuracy.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
DPK_STEPS="${DPK_STEPS:-$STEPS}"
positive() {   # positive NAME VALUE...: every value a positive integer
  local name="$1"; shift
  [ $# -gt 0 ] || { echo "time_to_accuracy.sh: $name needs at least one value" >&2; exit 2; }
  for v in "$@"; do
    case "$v" in ''|*[!0-9]*|0) echo "time_to_accuracy.sh: $name: '$v' is not a positive integer" >&2; exit 2 ;; esac
  done
}
# shellcheck disable=SC2086
{ positive --steps $STEPS; positive --dpk-steps $DPK_STEPS; positive --seeds $SEEDS
  positive --dpk-threads $DPK_THREADS; positive --tf-threads $TF_THREADS; }
for n in $STEPS $DPK_STEPS; do
  [ "$n" -ge 100 ] || { echo "time_to_accuracy.sh: $n steps: at least 100 (decay_steps = N / 50)" >&2; exit 2; }
done
case "$SCHEDULE" in whole|input) ;; *) echo "time_to_accuracy.sh: --schedule: '$SCHEDULE' is not whole or input" >&2; exit 2 ;; esac
for p in $PRECISIONS; do
  case "$p" in float64|float32) ;; *) echo "time_to_accuracy.sh: --precision: '$p' is not float64 or float32" >&2; exit 2 ;; esac
done
case "$DPK_TRAIN" in /*) ;; *) DPK_TRAIN="$PWD/$DPK_TRAIN" ;; esac
[ -f "$INPUT" ] || { echo "time_to_accuracy.sh: --input: '$INPUT' not found" >&2; exit 2; }
INPUT=$(realpath "$INPUT")
# the input's first validation system, absolute (relative paths are from the input's folder)
VALIDATION=$(python3 - "$INPUT" <<'EOF'
import json, os, sys
try:
    systems = json.load(open(sys.argv[1]))["training"]["validation_data"]["systems"]
    first = systems if isinstance(systems, str) else systems[0]
except (KeyError, IndexError, TypeError, ValueError) as e:
    sys.exit(f"time_to_accuracy.sh: --input {sys.argv[1]}: no training.validation_data.systems to test the models on ({e!r})")
print(os.path.normpath(os.path.join(os.path.dirname(sys.argv[1]), first)))
EOF
) || exit 2
[ -d "$VALIDATION" ] || { echo "time_to_accuracy.sh: --input $INPUT: validation system '$VALIDATION' not found" >&2; exit 2; }
[ -x "$DPK_TRAIN" ] || { echo "time_to_accuracy.sh: '$DPK_TRAIN' is not built (cmake --build build/openmp --target dpk-train)" >&2; exit 2; }
command -v /usr/bin/time >/dev/null || { echo "time_to_accuracy.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
DP=""
if [ -n "$VENV" ]; then
  if [ -x "$VENV/bin/dp" ] && "$VENV/bin/python" -c "import tensorflow" >/dev/null 2>&1; then DP="$VENV/bin/dp"
  else echo "time_to_accuracy.sh: --venv $VENV has no dp with tensorflow: DeePMD-kit skipped" >&2; fi
else
  echo "time_to_accuracy.sh: no --venv: DeePMD-kit skipped, dpk's models tested by dpk-train test only" >&2
fi

mkdir -p "$OUT"
TSV="$OUT/results.tsv"
printf 'code\tprecision\tschedule\tthreads\tsteps\tseed\ttrain_wall_s\ttrain_cpu_s\tfreeze_wall_s\trmse_e_atom\trmse_f\trmse_v_atom\tdpk_rmse_e_atom\tdpk_rmse_f\tdpk_rmse_v_atom\n' >"$TSV"

# write_input STEPS PRECISION SEED FILE: the input of one run, its systems as absolute paths
write_input() {
  python3 - "$4" "$1" "$3" "$SCHEDULE" "$INPUT" "$2" <<'EOF'
import json, math, os, sys
path, steps, seed, schedule, source, precision = sys.argv[1:4] + sys.argv[4:7]
steps, seed = int(steps), int(seed)
j = json.load(open(source))
t = j["training"]
for part in ("training_data", "validation_data"):
    if part in t:
        systems = t[part]["systems"]
        systems = [systems] if isinstance(systems, str) else systems
        t[part]["systems"] = [os.path.normpath(os.path.join(os.path.dirname(source), s)) for s in systems]
t["numb_steps"], t["disp_freq"], t["save_freq"] = steps, steps // 20, steps
j["model"]["descriptor"]["precision"] = precision
j["model"]["fitting_net"]["precision"] = precision
lr = j["learning_rate"]
if schedule == "whole":
    lr["decay_steps"] = steps // 50
else:   # the source's own schedule, its first `steps` steps
    lr["decay_rate"] = math.exp(math.log(max(lr["stop_lr"], 1e-10) / lr["start_lr"]) * lr["decay_steps"]
                                / json.load(open(source))["training"]["numb_steps"])
j["model"]["descriptor"]["seed"] = seed
j["model"]["fitting_net"]["seed"] = seed
t["seed"] = seed + 9
json.dump(j, open(path, "w"), indent=1)
EOF
}

# checked LOG CMD...: CMD with its output in LOG; on failure the log's last lines and exit (the
# runs below are in subshells whose status is tested, where set -e does not act).
checked() {
  local log="$1"; shift
  if ! "$@" >"$log" 2>&1; then
    echo "time_to_accuracy.sh: failed in $PWD: $*; last lines of $log:" >&2
    tail -5 "$log" >&2
    exit 1
  fi
}
# timed LOG TIMEFILE CMD...: checked, with wall, user and sys seconds in TIMEFILE
timed() {
  local log="$1" tf="$2"; shift 2
  checked "$log" /usr/bin/time -f '%e %U %S' -o "$tf" "$@"
}

# rmse LOG: "energy_per_atom force virial_per_atom" from a `dp test` / `dpk-train test` output
# (virial "-" when the system has no virial labels)
rmse() {
  python3 - "$1" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
e = re.findall(r"Energy RMSE/Natoms\s*:\s*(\S+)", text)
f = re.findall(r"Force\s+RMSE\s*:\s*(\S+)", text)
if not e or not f:
    sys.exit(f"time_to_accuracy.sh: no energy/force RMSE in {sys.argv[1]}")
v = re.findall(r"Virial RMSE/Natoms\s*:\s*(\S+)", text)
print(float(e[-1]), float(f[-1]), float(v[-1]) if v else "-")
EOF
}

# run CODE PRECISION STEPS SEED: one training run, its model tested, one row in the TSV
run() {
  local code="$1" p="$2" n="$3" s="$4" dir="$OUT/$1-$2-n$3-s$4" threads="$TF_THREADS" wall user sys freeze="-" e="-" f="-" v="-" de="-" df="-" dv="-"
  [ "$code" = dpk ] && threads="$DPK_THREADS"
  rm -rf "$dir"; mkdir -p "$dir"
  write_input "$n" "$p" "$s" "$dir/input.json"
  echo "time_to_accuracy.sh: $code $p $n steps seed $s ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg))" >&2
  (
    cd "$dir" || exit 1
    if [ "$code" = dpk ]; then
      timed train.log train.time env OMP_NUM_THREADS="$threads" "$DPK_TRAIN" train input.json
      checked dpk_test.log "$DPK_TRAIN" test -m model.dpk -s "$VALIDATION"
      if [ -n "$DP" ]; then
        checked export.log "$DPK_TRAIN" export -m model.dpk -o model.dp
        checked convert.log "$DP" convert-backend model.dp model.pb
      fi
    else
      timed train.log train.time env OMP_NUM_THREADS="$threads" DP_INTRA_OP_PARALLELISM_THREADS="$threads" \
        DP_INTER_OP_PARALLELISM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$DP" --tf train input.json
      timed freeze.log freeze.time "$DP" --tf freeze -o model.pb
    fi
    [ -z "$DP" ] || checked dp_test.log "$DP" --tf test -m model.pb -s "$VALIDATION"
  ) || exit 1
  read -r wall user sys <"$dir/train.time"
  [ "$code" = tf ] && freeze=$(cut -d' ' -f1 "$dir/freeze.time")
  [ -n "$DP" ] && read -r e f v < <(rmse "$dir/dp_test.log")
  [ "$code" = dpk ] && read -r de df dv < <(rmse "$dir/dpk_test.log")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$code" "$p" "$SCHEDULE" "$threads" "$n" "$s" \
    "$wall" "$(python3 -c "print(f'{$user + $sys:.1f}')")" "$freeze" "$e" "$f" "$v" "$de" "$df" "$dv" >>"$TSV"
}

# DeePMD-kit TF seeds every layer's initializers with seed + a small offset (3 per layer and
# tensor kind: up to ~110 for nine embedding nets), and TensorFlow's normal draws from one op seed
# begin with the same numbers whatever the tensor's shape: TF's models for seeds closer than 1000
# share initial values (seed s's embedding biases are seed s + 1's first-layer weights), so their
# runs are not independent samples. dpk's seeds are independent streams.
if [ -n "$DP" ]; then
  close=$(python3 -c 'import sys; s = sorted(int(x) for x in sys.argv[1:]); print(" ".join(f"{a},{b}" for a, b in zip(s, s[1:]) if b - a < 1000))' $SEEDS)
  [ -z "$close" ] || echo "time_to_accuracy.sh: warning: seeds closer than 1000 ($close): DeePMD-kit TF's initial models for them share random numbers (each layer's op seed is seed + a small offset), so its runs are not independent samples; space seeds by 1000 or more, e.g. --seeds \"1 1001 2001\"" >&2
fi
echo "time_to_accuracy.sh: $INPUT, schedule $SCHEDULE; dpk $DPK_STEPS steps ($DPK_THREADS threads)${DP:+, DeePMD-kit TF $STEPS steps ($TF_THREADS threads)}, precision $PRECISIONS, seeds $SEEDS; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}" >&2
for p in $PRECISIONS; do
  for s in $SEEDS; do
    [ -z "$DP" ] || run tf "$p" "$STEPS" "$s"
    for n in $DPK_STEPS; do run dpk "$p" "$n" "$s"; done
  done
done

python3 - "$TSV" "$INPUT" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
names = {"dpk": "dpk-train", "tf": "DeePMD-kit TF"}
print(f"input: {sys.argv[2]}")
print(f"schedule: {rows[0]['schedule'] if rows else '-'}")
print("| precision | code | threads | steps | seed | train wall s | train CPU s | freeze s | "
      "rmse_e eV/atom (dp test) | rmse_f eV/A (dp test) | rmse_v eV/atom (dp test) | "
      "dpk-train test rmse_e / rmse_f / rmse_v |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in sorted(rows, key=lambda r: (r["precision"], r["code"] != "tf", int(r["steps"]), int(r["seed"]))):
    fmt = lambda v: v if v == "-" else f"{float(v):.3g}"
    own = "-" if r["dpk_rmse_e_atom"] == "-" else \
        f"{fmt(r['dpk_rmse_e_atom'])} / {fmt(r['dpk_rmse_f'])} / {fmt(r['dpk_rmse_v_atom'])}"
    print(f"| {r['precision']} | {names[r['code']]} | {r['threads']} | {r['steps']} | {r['seed']} | "
          f"{float(r['train_wall_s']):.0f} | {float(r['train_cpu_s']):.0f} | {r['freeze_wall_s']} | "
          f"{fmt(r['rmse_e_atom'])} | {fmt(r['rmse_f'])} | {fmt(r['rmse_v_atom'])} | {own} |")
EOF

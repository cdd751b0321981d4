#!/usr/bin/env bash
# Checks benchmarks/time_to_accuracy.sh with this build's dpk-train and a stand-in DeePMD-kit venv
# (a `python` that imports anything, a `dp` that records what it was asked and prints RMSEs that
# name the model it tested): the options it refuses, the input each code trains on (steps,
# schedule, seeds, precision), the threads each code gets, that dpk's model reaches `dp test`
# through dpk-train export + dp convert-backend, that each RMSE lands in the row of the model it
# belongs to (dpk-train test's own numbers beside dp test's), both schedules' inputs, and --input:
# another input.json whose relative system paths are taken from its own folder.
#   check_time_to_accuracy.sh SOURCE_DIR DPK_TRAIN WORK_DIR
set -u
[ $# -eq 3 ] || { echo "usage: $0 SOURCE_DIR DPK_TRAIN WORK_DIR" >&2; exit 2; }
src=$(realpath "$1") train=$(realpath "$2") work=$3
script="$src/benchmarks/time_to_accuracy.sh"
fail() { echo "check_time_to_accuracy: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work/venv/bin" || exit 1
work=$(realpath "$work")
export OMP_PROC_BIND=false

# Refused options: exit status 2 and a message naming the value.
refused() {   # refused WANT ARGS...
  local want="$1" out rc; shift
  out=$("$script" --dpk-train "$train" --out "$work/refused" "$@" 2>&1); rc=$?
  [ "$rc" -eq 2 ] || fail "'$*' exited $rc, expected 2: $out"
  grep -qF -- "$want" <<<"$out" || fail "'$*': message lacks '$want': $out"
}
refused "--steps: '0' is not a positive integer" --steps 0
refused "50 steps: at least 100" --steps 50
refused "--precision: 'float16' is not float64 or float32" --precision float16
refused "--dpk-threads: 'two' is not a positive integer" --dpk-threads two
refused "unknown option '--seed'" --seed 3
refused "--schedule: 'step' is not whole or input" --schedule step
refused "'$work/none' is not built" --dpk-train "$work/none"
refused "--input: '$work/none.json' not found" --input "$work/none.json"
echo '{"training": {"training_data": {"systems": ["a"]}}}' >"$work/no_validation.json"
refused "no training.validation_data.systems" --input "$work/no_validation.json"
echo '{"training": {"validation_data": {"systems": ["gone"]}}}' >"$work/gone.json"
refused "validation system '$work/gone' not found" --input "$work/gone.json"

# The stand-in venv.
printf '#!/bin/sh\nexit 0\n' >"$work/venv/bin/python"
cat >"$work/venv/bin/dp" <<'EOF'
#!/usr/bin/env bash
# stand-in dp: appends "$PWD: args | threads" to $STANDIN_LOG; models are one-word files; TF's
# model "has" a virial RMSE, dpk's not (a system without virial labels)
echo "$PWD: $* | intra=${DP_INTRA_OP_PARALLELISM_THREADS:-} inter=${DP_INTER_OP_PARALLELISM_THREADS:-} openblas=${OPENBLAS_NUM_THREADS:-}" >>"$STANDIN_LOG"
case "$1 $2" in
  "--tf train") [ -s "$3" ] && echo ckpt >model.ckpt ;;
  "--tf freeze") [ -s model.ckpt ] && echo tf >"$4" ;;
  "convert-backend "*) [ -s "$2" ] && [ "$(head -c 4 "$2" | od -An -c | tr -d ' ')" = '211HDF' ] && echo dpk >"$3" ;;
  "--tf test")
    case "$(cat "$4")" in
      tf) echo "Energy RMSE/Natoms : 5.000000e-01 eV"; echo "Force  RMSE        : 2.500000e-01 eV/A"
          echo "Virial RMSE/Natoms : 3.000000e-02 eV" ;;
      dpk) echo "Energy RMSE/Natoms : 1.250000e-01 eV"; echo "Force  RMSE        : 6.250000e-02 eV/A" ;;
      *) exit 1 ;;
    esac ;;
  *) exit 1 ;;
esac
EOF
chmod 755 "$work/venv/bin/python" "$work/venv/bin/dp"
export STANDIN_LOG="$work/dp.log"

out=$("$script" --venv "$work/venv" --dpk-train "$train" --steps 100 --dpk-steps "100 200" --precision float32 \
      --seeds 2 --dpk-threads 1 --tf-threads 3 --out "$work/out" 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || fail "exited $rc"
runs="$work/out"
for d in tf-float32-n100-s2 dpk-float32-n100-s2 dpk-float32-n200-s2; do
  [ -s "$runs/$d/input.json" ] || fail "$d/input.json missing"
done
[ ! -e "$runs/tf-float32-n200-s2" ] || fail "DeePMD-kit ran the dpk-only step count"
python3 - "$runs" <<'EOF' || fail "inputs"
import json, sys
for code, n in (("tf", 100), ("dpk", 100), ("dpk", 200)):
    j = json.load(open(f"{sys.argv[1]}/{code}-float32-n{n}-s2/input.json"))
    d, f, t = j["model"]["descriptor"], j["model"]["fitting_net"], j["training"]
    got = (t["numb_steps"], t["disp_freq"], t["save_freq"], j["learning_rate"]["decay_steps"],
           d["seed"], f["seed"], t["seed"], d["precision"], f["precision"])
    want = (n, n // 20, n, n // 50, 2, 2, 11, "float32", "float32")
    assert got == want, (code, n, got, want)
    assert "decay_rate" not in j["learning_rate"], j["learning_rate"]
    assert t["validation_data"]["systems"][0].endswith("/data_3"), t["validation_data"]
EOF
# dp: TF trained with 3 intra-op threads, 1 inter-op and 1 BLAS thread; dpk's model converted.
grep -q "tf-float32-n100-s2: --tf train input.json | intra=3 inter=1 openblas=1" "$work/dp.log" || fail "dp train call: $(cat "$work/dp.log")"
grep -q "dpk-float32-n200-s2: convert-backend model.dp model.pb" "$work/dp.log" || fail "no convert-backend of dpk's model"
[ "$(grep -c -- '--tf test -m model.pb' "$work/dp.log")" -eq 3 ] || fail "expected 3 dp test calls"

# The table: each model's dp test RMSEs in its own row, dpk-train test's beside dpk's.
python3 - "$runs/results.tsv" <<'EOF' || fail "results.tsv"
import csv, math, sys
rows = {(r["code"], r["steps"]): r for r in csv.DictReader(open(sys.argv[1]), delimiter="\t")}
assert set(rows) == {("tf", "100"), ("dpk", "100"), ("dpk", "200")}, rows.keys()
tf = rows[("tf", "100")]
assert all(r["schedule"] == "whole" for r in rows.values()), rows
assert (tf["threads"], tf["rmse_e_atom"], tf["rmse_f"], tf["rmse_v_atom"], tf["dpk_rmse_f"]) == ("3", "0.5", "0.25", "0.03", "-"), tf
assert float(tf["freeze_wall_s"]) >= 0
for n in ("100", "200"):
    r = rows[("dpk", n)]
    assert (r["threads"], r["rmse_e_atom"], r["rmse_f"], r["rmse_v_atom"], r["freeze_wall_s"]) == ("1", "0.125", "0.0625", "-", "-"), r
    assert r["dpk_rmse_v_atom"] == "-", r   # the water data have no virial labels
    e, f = float(r["dpk_rmse_e_atom"]), float(r["dpk_rmse_f"])   # dpk-train test of the model just trained
    assert 0 < e < 1 and 0 < f < 10 and math.isfinite(e) and math.isfinite(f), r
    assert float(r["train_wall_s"]) > 0 and float(r["train_cpu_s"]) > 0, r
EOF
! grep -q "seeds closer than 1000" <<<"$out" || fail "close-seed warning with one seed: $out"
# Seeds 1 and 2: DeePMD-kit TF's initial models share random numbers; a warning says so (and 1001 not).
# (a small model keeps the three runs short)
python3 - "$src/examples/water/se_e2_a/input.json" "$work/small.json" "$src/examples/water/data" <<'EOF' || fail "small.json"
import json, sys
j = json.load(open(sys.argv[1]))
j["model"]["descriptor"].update(neuron=[2, 4], axis_neuron=2)
j["model"]["fitting_net"]["neuron"] = [4]
j["training"]["training_data"]["systems"] = [sys.argv[3] + "/data_0"]
j["training"]["validation_data"]["systems"] = [sys.argv[3] + "/data_3"]
json.dump(j, open(sys.argv[2], "w"))
EOF
out2=$("$script" --venv "$work/venv" --input "$work/small.json" --dpk-train "$train" --steps 100 --precision float32 \
       --seeds "1 2 1002" --dpk-threads 1 --out "$work/close" 2>&1) || fail "seeds 1 2 1002: $out2"
grep -qF 'warning: seeds closer than 1000 (1,2): DeePMD-kit TF' <<<"$out2" || fail "no close-seed warning: $out2"
for want in "| float32 | DeePMD-kit TF | 3 | 100 | 2 |" "| float32 | dpk-train | 1 | 200 | 2 |" "| 0.125 | 0.0625 | - |" \
            "| 0.5 | 0.25 | 0.03 | - |"; do
  grep -qF -- "$want" <<<"$out" || fail "table lacks '$want'"
done

# Without a venv: dpk alone, tested by dpk-train test; the input's own schedule, its first 100 steps.
out=$("$script" --dpk-train "$train" --steps 100 --precision float64 --dpk-threads 1 --schedule input \
      --out "$work/alone" 2>&1) || fail "dpk alone: $out"
grep -qF "no --venv: DeePMD-kit skipped" <<<"$out" || fail "no message about the missing venv: $out"
grep -qx "schedule: input" <<<"$out" || fail "no 'schedule: input' line: $out"
python3 - "$work/alone/dpk-float64-n100-s1/input.json" "$src/examples/water/se_e2_a/input.json" <<'EOF' || fail "input schedule"
import json, sys
run, source = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
lr, lr0 = run["learning_rate"], source["learning_rate"]
assert run["training"]["numb_steps"] == 100 and lr["decay_steps"] == lr0["decay_steps"], lr
want = (lr0["stop_lr"] / lr0["start_lr"]) ** (lr0["decay_steps"] / source["training"]["numb_steps"])
assert abs(lr["decay_rate"] - want) < 1e-14 * want, (lr["decay_rate"], want)
EOF
grep -qE "^\| float64 \| dpk-train \| 1 \| 100 \| 1 \| .* \| - \| - \| - \| - \| [0-9.e-]+ / [0-9.e-]+ / - \|$" <<<"$out" \
  || fail "dpk-only row: $out"
# --input: the water input one folder deeper, its systems reached through ../../ (a link to the data)
mkdir -p "$work/elsewhere/a/b" && ln -s "$src/examples/water/data" "$work/elsewhere/water_data"
python3 - "$src/examples/water/se_e2_a/input.json" "$work/elsewhere/a/b/in.json" <<'EOF' || fail "writing in.json"
import json, sys
j = json.load(open(sys.argv[1]))
j["training"]["training_data"]["systems"] = ["../../water_data/data_1", "../../water_data/data_2"]
j["training"]["validation_data"]["systems"] = "../../water_data/data_0"
json.dump(j, open(sys.argv[2], "w"))
EOF
out=$(cd "$work/elsewhere" && "$script" --input a/b/in.json --dpk-train "$train" --steps 100 --precision float64 \
      --dpk-threads 1 --out "$work/other" 2>&1) || fail "--input: $out"
grep -qF "input: $work/elsewhere/a/b/in.json" <<<"$out" || fail "--input: table does not name the input: $out"
python3 - "$work/other/dpk-float64-n100-s1/input.json" "$work/elsewhere/water_data" <<'EOF' || fail "--input systems"
import json, sys
t = json.load(open(sys.argv[1]))["training"]
assert t["training_data"]["systems"] == [sys.argv[2] + "/data_1", sys.argv[2] + "/data_2"], t["training_data"]
assert t["validation_data"]["systems"] == [sys.argv[2] + "/data_0"], t["validation_data"]
EOF
grep -qE "^# system +: $work/elsewhere/water_data/data_0\$" "$work/other/dpk-float64-n100-s1/dpk_test.log" \
  || fail "--input: dpk-train test not on the input's validation system: $(head -3 "$work/other/dpk-float64-n100-s1/dpk_test.log")"
echo "check_time_to_accuracy: OK"

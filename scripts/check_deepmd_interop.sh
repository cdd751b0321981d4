#!/usr/bin/env bash
# Live cross-check of dpk's DeePMD-kit interop against an installed DeePMD-kit 3.x (TensorFlow
# backend). Not part of CI (needs DeePMD-kit + TensorFlow); docs/interop.md shows its output.
#
#   scripts/check_deepmd_interop.sh [DPK_TRAIN]      (default build/openmp/examples/trainer/dpk-train)
#   DP=/opt/dpk-venv/bin/dp PYTHON=/opt/dpk-venv/bin/python scripts/check_deepmd_interop.sh
#
# dpk -> DeePMD-kit: trains three small dpk models on the water example (type_one_side true and
# false, resnet_dt variants, fitting widths where DeePMD-kit's dpmodel layer defaults differ from
# its TensorFlow rule, float64 and float32), exports each to .dp and .yaml, converts them with
# `dp convert-backend` to frozen TensorFlow graphs, runs `dp --tf test`, and compares DeePMD-kit's
# predictions (TensorFlow, and the energies of its numpy dpmodel backend, which reads the layers'
# resnet flags; full precision) with dpk's own on
# data_3 (periodic), a triclinic copy of it and a non-periodic cluster.
# DeePMD-kit -> dpk: imports the TensorFlow graphs converted back to .dp with `dpk-train import`
# and compares again. dpk's side is `dpk-train test` on systems labelled with DeePMD-kit's
# predictions: its RMSE lines are then the RMS difference dpk - DeePMD-kit.
source "$(dirname "$0")/deepmd_check_env.sh" check_deepmd_interop "${1:-}"

# ---- systems: data_3 (first 4 frames), a triclinic copy, a non-periodic cluster
"$PYTHON" - "$ROOT/examples/water/data/data_3" <<'EOF'
import os, shutil, sys, numpy as np
src = sys.argv[1]
def write(name, coord, box, types, nopbc=False):
    os.makedirs(name + "/set.000", exist_ok=True)
    shutil.copy(src + "/type.raw", name + "/type.raw")
    shutil.copy(src + "/type_map.raw", name + "/type_map.raw")
    np.save(name + "/set.000/coord.npy", coord)
    if nopbc:
        open(name + "/nopbc", "w").close()
    else:
        np.save(name + "/set.000/box.npy", box)
coord = np.load(src + "/set.000/coord.npy")[:4]
box = np.load(src + "/set.000/box.npy")[:4]
types = np.loadtxt(src + "/type.raw", dtype=int)
write("sys_periodic", coord, box, types)
shear = np.array([[1, 0, 0], [0.2, 1, 0], [-0.15, 0.1, 1]])  # triclinic cell, same fractional positions
tri_box = np.stack([b.reshape(3, 3) @ shear for b in box]).reshape(-1, 9)
frac = np.stack([np.linalg.solve(b.reshape(3, 3).T, c.reshape(-1, 3).T).T for b, c in zip(box, coord)])
tri = np.stack([f @ tb.reshape(3, 3) for f, tb in zip(frac, tri_box)]).reshape(4, -1)
write("sys_triclinic", tri, tri_box, types)
write("sys_nopbc", coord, box, types, nopbc=True)
EOF

# ---- three small dpk models trained for 20 steps on data_0
make_input() {  # name tos emb_resnet_dt fitting_neuron fitting_resnet_dt precision
  cat > "$1.json" <<EOF
{"model": {"type_map": ["O", "H"],
  "descriptor": {"type": "se_e2_a", "sel": [46, 92], "rcut_smth": 0.5, "rcut": 6.0, "neuron": [4, 8],
                 "resnet_dt": $3, "axis_neuron": 4, "type_one_side": $2, "seed": 1, "precision": "$6"},
  "fitting_net": {"neuron": $4, "resnet_dt": $5, "seed": 1, "precision": "$6"}},
 "learning_rate": {"type": "exp", "decay_steps": 5000, "start_lr": 0.001, "stop_lr": 3.51e-8},
 "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1,
          "start_pref_v": 0, "limit_pref_v": 0},
 "training": {"training_data": {"systems": ["$ROOT/examples/water/data/data_0"], "batch_size": 1},
              "numb_steps": 20, "seed": 10, "disp_file": "lcurve.out", "disp_freq": 10, "save_freq": 20}}
EOF
}
make_input tos_true true false "[16, 16]" true float64
make_input tos_false false true "[32, 32, 64]" false float64   # 32 = 8 x 4: the dpmodel/TF trap
make_input float32 true false "[16, 16]" true float32
for m in tos_true tos_false float32; do
  "$DPK_TRAIN" train "$m.json" -o "run_$m" > "train_$m.log"
  cp "run_$m/model.dpk" "$m.dpk"
  "$DPK_TRAIN" export -m "$m.dpk" -o "$m.dp" | tail -1
  "$DPK_TRAIN" export -m "$m.dpk" -o "$m.yaml" | tail -1
  "$DP" convert-backend "$m.dp" "$m.pb" > "convert_$m.log" 2>&1
  "$DP" convert-backend "$m.yaml" "${m}_yaml.pb" >> "convert_$m.log" 2>&1
  "$DP" convert-backend "$m.pb" "${m}_back.dp" >> "convert_$m.log" 2>&1   # DeePMD-kit -> dpk
  "$DPK_TRAIN" import "${m}_back.dp" -o "${m}_back.dpk" | tail -1
done

# ---- DeePMD-kit's predictions (full precision), as labels of copies of the systems
"$PYTHON" - <<'EOF' 2>/dev/null
import os, shutil, numpy as np
from deepmd.infer import DeepPot
for m in ("tos_true", "tos_false", "float32"):
    for graph in (m + ".pb", m + "_yaml.pb", m + ".dp"):  # .dp: DeePMD-kit's numpy dpmodel backend
        dp = DeepPot(graph)
        for s in ("sys_periodic", "sys_triclinic", "sys_nopbc"):
            out = f"label_{graph.replace('.', '_')}_{s}"
            shutil.rmtree(out, ignore_errors=True)
            shutil.copytree(s, out)
            coord = np.load(s + "/set.000/coord.npy")
            box = np.load(s + "/set.000/box.npy") if not os.path.exists(s + "/nopbc") else None
            types = np.loadtxt(s + "/type.raw", dtype=int)
            e, f, v = dp.eval(coord, box, types)[:3]
            n = coord.shape[0]
            if graph.endswith(".dp"):  # the numpy backend has no forces/virials (NaN): energies only
                f, v = np.zeros_like(coord), np.zeros((n, 9))
            np.save(out + "/set.000/energy.npy", e.reshape(n).astype(np.float64))
            np.save(out + "/set.000/force.npy", f.reshape(n, -1).astype(np.float64))
            np.save(out + "/set.000/virial.npy", v.reshape(n, 9).astype(np.float64))
            with open(out + "/scale.txt", "w") as fh:  # RMS of the values, for relative numbers
                fh.write(" ".join(str(np.sqrt(np.mean(np.square(x)))) for x in (e, f, v)) + "\n")
EOF

say "dp --tf test on the exported graphs (acceptance: runs; its labels are its own predictions)"
for m in tos_true tos_false float32; do
  "$DP" --tf test -m "$m.pb" -s "label_${m}_pb_sys_periodic" -d "dptest_$m" > "dptest_$m.log" 2>&1
  grep -E "Energy RMSE  |Force  RMSE|Virial RMSE  " "dptest_$m.log" | head -3 | sed "s/^.*DEEPMD INFO */  $m: /"
done

say "dp --tf test and dpk-train test on data_3 with its own labels (same errors expected)"
for m in tos_true tos_false float32; do
  "$DP" --tf test -m "$m.pb" -s "$ROOT/examples/water/data/data_3" -d "data3_$m" > "data3_dp_$m.log" 2>&1
  "$DPK_TRAIN" test -m "$m.dpk" -s "$ROOT/examples/water/data/data_3" > "data3_dpk_$m.log"
  paste <(grep -E "Energy RMSE  |Force  RMSE" "data3_dp_$m.log" | head -2 | sed "s/^.*DEEPMD INFO *//; s/ *:/:/") \
        <(grep -E "^Energy RMSE  |^Force  RMSE" "data3_dpk_$m.log" | sed "s/ *:/:/") | sed "s/^/  $m  dp: /; s/\t/   dpk-train: /"
done

rel() {  # dpk-train test output, scale file -> "energy force virial" relative RMS differences
  awk -v scale="$(cat "$2")" 'BEGIN { split(scale, s, " ") }
    /^Energy RMSE  /  { e = $4 / s[1] } /^Force  RMSE/ { f = $4 / s[2] } /^Virial RMSE  / { v = $4 / s[3] }
    END { printf "%.2e %.2e %.2e", e, f, v }' "$1"
}
say "relative RMS difference dpk - DeePMD-kit (energy force virial)"
printf "%-10s %-28s %-14s %-28s %-28s\n" model "DeePMD-kit side" system "dpk model exported" "dpk model imported back"
fail=0
for m in tos_true tos_false float32; do
  tol=1e-10; [ "$m" = float32 ] && tol=1e-4
  for graph in "$m.pb" "${m}_yaml.pb" "$m.dp"; do
    for s in sys_periodic sys_triclinic sys_nopbc; do
      label="label_${graph//./_}_$s"
      "$DPK_TRAIN" test -m "$m.dpk" -s "$label" > "dpktest.log"
      a=$(rel dpktest.log "$label/scale.txt")
      "$DPK_TRAIN" test -m "${m}_back.dpk" -s "$label" > "dpktest_back.log"
      b=$(rel dpktest_back.log "$label/scale.txt")
      side="TF ($graph)"
      if [ "$graph" = "$m.dp" ]; then  # energies only: mask force and virial
        side="dpmodel numpy ($graph)"; a="${a%% *} - -"; b="${b%% *} - -"
      fi
      printf "%-10s %-28s %-14s %-28s %-28s\n" "$m" "$side" "$s" "$a" "$b"
      for x in $a $b; do [ "$x" = - ] && continue; awk -v x="$x" -v t="$tol" 'BEGIN { exit !(x <= t) }' || fail=1; done
    done
  done
done
if [ "$fail" = 0 ]; then say "PASS (float64 <= 1e-10, float32 <= 1e-4)"; else say "FAIL"; exit 1; fi

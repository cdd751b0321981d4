#!/usr/bin/env bash
# Live cross-check of dpk's training step against DeePMD-kit 3.x's TensorFlow backend: both
# codes start from the same weights, statistics and energy bias and train on a one-frame system
# (so that every batch is the same frame whatever each code's random draws), and their weights
# are compared after 1, 5 and 30 steps. Not part of CI (needs DeePMD-kit + TensorFlow);
# docs/trainer.md shows its output.
#
#   scripts/check_deepmd_training.sh [DPK_TRAIN]   (default build/openmp/examples/trainer/dpk-train)
#   DP=/opt/dpk-venv/bin/dp PYTHON=/opt/dpk-venv/bin/python scripts/check_deepmd_training.sh
#
# The start: dpk-train trains 0 steps (its initialisation, statistics and bias), exports the
# model (.dp) and `dp convert-backend` freezes it; a one-step DeePMD-kit run gives a checkpoint
# whose variables are then replaced by the frozen dpk values (Adam's moments zero, its beta powers
# at beta1 and beta2, global_step 0), and `dp --tf train --init-model` trains from it. dpk trains
# from its own model file with --init-model (fresh Adam, step 0). Cases: float64 with DeePMD-kit
# 3.2's warmup, smooth decay, stop_lr_ratio and Adam betas; float64 with type_one_side false and
# the plain schedule; float32; and float64 on one Al-Cu-Mg frame of examples/eam (three types,
# nine embedding nets, a virial term in the loss: the training gradient's second-order virial
# path), made here by examples/eam/make_data.py (needs numpy in PYTHON and LAMMPS' lmp).
source "$(dirname "$0")/deepmd_check_env.sh" check_deepmd_training "${1:-}"

CASES="f64_warmup_betas f64_tos_false f32 f64_alcumg_virial"
# ---- the inputs: one frame of the water example, one Al-Cu-Mg frame; four cases
"$PYTHON" "$ROOT/examples/eam/make_data.py" alcumg alcumg --frames 1 > alcumg.log
"$PYTHON" - "$ROOT/examples/water/data/data_0" alcumg/data_0 <<'EOF'
import json, os, shutil, sys
import numpy as np
for src, one in zip(sys.argv[1:], ("one", "one_alcumg")):
    os.makedirs(f"{one}/set.000", exist_ok=True)
    for f in ("type.raw", "type_map.raw"):
        shutil.copy(os.path.join(src, f), os.path.join(one, f))
    for f in os.listdir(os.path.join(src, "set.000")):
        np.save(os.path.join(one, "set.000", f), np.load(os.path.join(src, "set.000", f))[:1])
warmup = {"type": "exp", "start_lr": 1e-3, "stop_lr_ratio": 1e-2, "decay_steps": 4, "warmup_steps": 5,
          "warmup_start_factor": 0.2, "smooth": True}
plain = {"type": "exp", "start_lr": 1e-3, "stop_lr": 1e-5, "decay_steps": 4}
water = (["O", "H"], [46, 92], 0.5, "one", 0)
alloy = (["Al", "Cu", "Mg"], [64, 20, 16], 2.0, "one_alcumg", 1)
cases = {"f64_warmup_betas": ("float64", True, warmup, {"type": "Adam", "adam_beta1": 0.85, "adam_beta2": 0.99}, water),
         "f64_tos_false": ("float64", False, plain, None, water),
         "f32": ("float32", True, plain, None, water),
         "f64_alcumg_virial": ("float64", False, plain, None, alloy)}
for name, (precision, one_side, lr, optimizer, (type_map, sel, smth, one, pref_v)) in cases.items():
    os.makedirs(name, exist_ok=True)
    c = {"model": {"type_map": type_map,
                   "descriptor": {"type": "se_e2_a", "sel": sel, "rcut_smth": smth, "rcut": 6.0, "neuron": [8, 16],
                                  "resnet_dt": False, "axis_neuron": 4, "type_one_side": one_side, "seed": 1,
                                  "precision": precision},
                   "fitting_net": {"neuron": [32, 32, 32], "resnet_dt": True, "seed": 1, "precision": precision}},
         "learning_rate": lr,
         "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1,
                  "start_pref_v": pref_v, "limit_pref_v": pref_v},
         "training": {"training_data": {"systems": [os.path.abspath(one)], "batch_size": 1}, "numb_steps": 30,
                      "seed": 10, "disp_file": "lcurve.out", "disp_freq": 1, "save_freq": 1, "max_ckpt_keep": 40}}
    if optimizer:
        c["optimizer"] = optimizer
    json.dump(c, open(os.path.join(name, "in.json"), "w"), indent=1)
    # the template checkpoint: one step, no warmup (DeePMD-kit refuses a warmup as long as the run)
    c["training"]["numb_steps"] = 1
    c["learning_rate"] = dict(lr, warmup_steps=0)
    json.dump(c, open(os.path.join(name, "template.json"), "w"), indent=1)
EOF

for case in $CASES; do
  say "$case: dpk's start, DeePMD-kit's checkpoint of it"
  (
    cd "$case"
    "$DPK_TRAIN" train in.json --stop-at 0 -o init > init.log 2>&1
    "$DPK_TRAIN" export -m init/model.dpk -o init.dp > /dev/null
    "$DP" convert-backend init.dp init.pb > convert.log 2>&1
    mkdir -p template && (cd template && "$DP" --tf train ../template.json > log 2>&1)
    "$PYTHON" - <<'EOF'
import json
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import tensor_util
from deepmd.tf.utils.graph import load_graph_def
tf1 = tf.compat.v1
tf1.disable_eager_execution()
_, graph_def = load_graph_def("init.pb")
dpk = {n.name: tensor_util.MakeNdarray(n.attr["value"].tensor) for n in graph_def.node if n.op == "Const"}
optimizer = json.load(open("in.json")).get("optimizer", {})
betas = (optimizer.get("adam_beta1", 0.9), optimizer.get("adam_beta2", 0.999))
reader = tf.train.load_checkpoint("template/model.ckpt")
dtypes = reader.get_variable_to_dtype_map()
values, taken = {}, 0
for name in reader.get_variable_to_shape_map():
    value = reader.get_tensor(name)
    if name in dpk:
        assert dpk[name].shape == value.shape and dpk[name].dtype == value.dtype, name
        value, taken = dpk[name], taken + 1
    elif name.endswith("/Adam") or name.endswith("/Adam_1") or name == "global_step":
        value = np.zeros_like(value)
    elif name in ("beta1_power", "beta2_power"):
        value = np.array(betas[name == "beta2_power"], dtype=value.dtype)
    else:
        raise SystemExit(f"unexpected variable {name} in DeePMD-kit's checkpoint")
    values[name] = value
with tf1.Graph().as_default():
    variables = [tf1.Variable(values[n], name=n, dtype=dtypes[n]) for n in sorted(values)]
    with tf1.Session() as session:
        session.run(tf1.global_variables_initializer())
        tf1.train.Saver(variables).save(session, "start/model.ckpt")
print(f"  {taken} tensors from dpk's start")
EOF
    say "$case: 30 steps in DeePMD-kit and in dpk"
    mkdir -p dp && (cd dp && "$DP" --tf train ../in.json --init-model ../start/model.ckpt > log 2>&1)
    for n in 1 5 30; do
      "$DPK_TRAIN" train in.json --init-model init/model.dpk --stop-at $n -o dpk$n > dpk$n.log 2>&1
      "$DPK_TRAIN" export -m dpk$n/model.dpk -o dpk$n.dp > /dev/null
      "$DP" convert-backend dpk$n.dp dpk$n.pb > /dev/null 2>&1
    done
  )
done

say "weights after n steps: largest |dpk - DeePMD-kit| over a tensor / largest move of that tensor from the start"
"$PYTHON" - "$CASES" <<'EOF'
import sys
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import tensor_util
from deepmd.tf.utils.graph import load_graph_def
def constants(path):
    _, graph_def = load_graph_def(path)
    return {n.name: tensor_util.MakeNdarray(n.attr["value"].tensor) for n in graph_def.node if n.op == "Const"}
def columns(path):
    return [line.split()[1:] for line in open(path) if not line.startswith("#")]
print("| case | steps | worst tensor | difference / move | median over tensors | lcurve.out columns |")
print("|---|---|---|---|---|---|")
for case in sys.argv[1].split():
    start = constants(f"{case}/init.pb")
    for n in (1, 5, 30):
        dpk = constants(f"{case}/dpk{n}.pb")
        reader = tf.train.load_checkpoint(f"{case}/dp/model.ckpt-{n}")
        ratios = {}
        for name in reader.get_variable_to_shape_map():
            if name not in dpk or "Adam" in name or name.split("/")[0] in ("descrpt_attr", "fitting_attr", "model_attr"):
                continue
            theirs = reader.get_tensor(name).astype(np.float64)
            move = np.max(np.abs(theirs - start[name]))
            ratios[name] = np.max(np.abs(theirs - dpk[name])) / move
        worst = max(ratios, key=ratios.get)
        theirs, ours = columns(f"{case}/dp/lcurve.out")[: n + 1], columns(f"{case}/dpk{n}/lcurve.out")[: n + 1]
        differ = sum(a != b for a, b in zip(theirs, ours)) + abs(len(theirs) - len(ours))
        print(f"| {case} | {n} | {worst} | {ratios[worst]:.1e} | {np.median(list(ratios.values())):.1e} | "
              f"{'equal' if differ == 0 else f'{differ} of {max(len(theirs), len(ours))} lines differ'} |")
EOF

"""Records what DeePMD-kit does with the systems in this folder (the fixtures of the dpk tests).

Needs DeePMD-kit with the TensorFlow backend (measured with DeePMD-kit 3.2.0, tensorflow-cpu
2.21, in /opt/dpk-venv):
    /opt/dpk-venv/bin/python tests/data/multi_system/make_reference.py
For each case of CASES it writes an input.json (the model of tests: se_e2_a, rcut 6, sel
[46, 92]), runs `dp --tf train input.json` for 0 steps in a scratch folder, and keeps
  - the system probabilities of the "Summary of DataSystem" table DeePMD-kit logs (4 digits),
  - the same probabilities at full precision from deepmd.utils.data_system.DeepmdDataSystem
    (the object `dp train` builds), and the batch sizes and batch counts of that table,
  - total_numb_batch, what training.num_epoch multiplies (compute_total_numb_batch),
  - for the cases "stat*": descrpt_attr/t_avg and t_std of the checkpoint (the descriptor
    statistics of data_stat_nbatch = 10 batches of every system; one (r, a, a, a) row per
    centre type) and fitting_attr/t_bias_atom_e (the energy bias fitted from those batches);
    "stat_davg_zero" with the descriptor's set_davg_zero.
Everything goes to reference.json next to this script.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEMS = ["sys_a", "sys_b", "sys_c"]
DP = os.path.join(os.path.dirname(sys.executable), "dp")

CASES = {
    # name: (batch_size, auto_prob or None, seed[, descriptor keys])
    "auto": ("auto", None, 10),
    "auto8": ("auto:8", None, 10),
    "stat": ([2, 1, 1], None, 10),
    "stat_seed11": ([2, 1, 1], None, 11),
    "stat_davg_zero": ([2, 1, 1], None, 10, {"set_davg_zero": True}),
    "uniform": ("auto", "prob_uniform", 10),
    "blocks": ("auto", "prob_sys_size;0:1:0.25;1:3:0.75", 10),
}


def input_json(systems, batch_size, auto_prob, seed, descriptor_keys=None):
    data = {"systems": systems, "batch_size": batch_size}
    if auto_prob is not None:
        data["auto_prob"] = auto_prob
    result = {
        "model": {
            "type_map": ["O", "H"],
            "descriptor": {"type": "se_e2_a", "sel": [46, 92], "rcut_smth": 0.5, "rcut": 6.0, "neuron": [4, 8],
                           "resnet_dt": False, "axis_neuron": 4, "type_one_side": True, "seed": 1,
                           "precision": "float64"},
            "fitting_net": {"neuron": [8, 8], "resnet_dt": True, "seed": 1, "precision": "float64"},
        },
        "learning_rate": {"type": "exp", "decay_steps": 5000, "start_lr": 0.001, "stop_lr": 3.51e-8},
        "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1,
                 "start_pref_v": 0, "limit_pref_v": 0},
        "training": {"training_data": data, "numb_steps": 0, "seed": seed, "disp_file": "lcurve.out",
                     "disp_freq": 1, "save_freq": 1},
    }
    result["model"]["descriptor"].update(descriptor_keys or {})
    return result


def main():
    from deepmd.dpmodel.utils.training_utils import compute_total_numb_batch
    from deepmd.utils.data_system import DeepmdDataSystem

    reference = {"deepmd_kit": None, "cases": {}}
    import deepmd
    reference["deepmd_kit"] = deepmd.__version__
    for name, (batch_size, auto_prob, seed, *descriptor_keys) in CASES.items():
        work = tempfile.mkdtemp(prefix="dpk_ref_" + name + "_")
        systems = [os.path.join(HERE, s) for s in SYSTEMS]
        with open(os.path.join(work, "input.json"), "w") as f:
            json.dump(input_json(systems, batch_size, auto_prob, seed, *descriptor_keys), f, indent=1)
        run = subprocess.run([DP, "--tf", "train", "input.json"], cwd=work, capture_output=True, text=True)
        log = run.stdout + run.stderr
        if run.returncode != 0:
            sys.exit(f"dp train failed for {name}:\n{log}")
        # the table's rows: "[-- ]<system> <natoms> <batch size> <batches> <prob> <pbc>"
        rows = re.findall(r"\S+\s+(\d+)\s+(\d+)\s+(\d+)\s+([0-9.]+e[+-]\d+)\s+([TF])\s*$", log, re.M)
        assert len(rows) == len(SYSTEMS), log
        ds = DeepmdDataSystem(systems, batch_size, 1, rcut=6.0, type_map=["O", "H"])
        ds.set_sys_probs(None, auto_prob or "prob_sys_size")
        case = {
            "batch_size": batch_size,
            "auto_prob": auto_prob,
            "seed": seed,
            "natoms": [int(r[0]) for r in rows],
            "frames_per_batch": [int(r[1]) for r in rows],
            "nbatches": [int(r[2]) for r in rows],
            "logged_prob": [float(r[3]) for r in rows],
            "prob": [float(p) for p in ds.sys_probs],
            # what training.num_epoch multiplies (deepmd/tf/entrypoints/train.py)
            "total_numb_batch": int(compute_total_numb_batch(ds.nbatches, ds.sys_probs)),
        }
        if name.startswith("stat"):
            import tensorflow as tf
            ckpt = tf.train.load_checkpoint(os.path.join(work, "model.ckpt"))
            avg = ckpt.get_tensor("descrpt_attr/t_avg")
            std = ckpt.get_tensor("descrpt_attr/t_std")
            # se_e2_a statistics are one value per centre type and column (r, a, a, a)
            # repeated over the neighbour slots; keep the (ntypes, 4) table.
            case["avg"] = avg.reshape(2, -1, 4)[:, 0, :].tolist()
            case["std"] = std.reshape(2, -1, 4)[:, 0, :].tolist()
            # The per-type energy bias DeePMD-kit's TF backend fits from the same batches.
            case["bias_atom_e"] = ckpt.get_tensor("fitting_attr/t_bias_atom_e").tolist()
            assert np.all(avg.reshape(2, -1, 4) == avg.reshape(2, -1, 4)[:, :1, :])
            assert np.all(std.reshape(2, -1, 4) == std.reshape(2, -1, 4)[:, :1, :])
        reference["cases"][name] = case
        print(name, case["logged_prob"], case["prob"], case.get("avg"), case.get("std"))
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1, default=lambda x: x.tolist())
        f.write("\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Regenerates the DeePMD-kit interop fixtures of dpk (tests/data/deepmd_interop).

Needs DeePMD-kit 3.x with its TensorFlow backend (e.g. /opt/dpk-venv/bin/python generate.py).
For each model case below:
  1. build the model with deepmd.dpmodel (get_model), give it random but realistic statistics
     (davg/dstd), energy bias and timesteps, and save it as a .dp file;
  2. `dp convert-backend` it to a frozen TensorFlow graph (model.pb is not kept: too big);
  3. `dp convert-backend` the graph back to `<case>.dp` and `<case>.yaml`: these are the files
     DeePMD-kit's TensorFlow backend writes, the ones dpk's importer reads in the tests;
  4. evaluate the graph with deepmd.infer.DeepPot (TensorFlow, float64) on small periodic
     triclinic and non-periodic systems, and write them as deepmd/npy systems whose labels
     (energy, force, virial) are DeePMD-kit's predictions, plus the atomic energies and virials
     (set.000/atom_ener.npy, set.000/atom_virial.npy).
Deterministic: fixed seeds everywhere.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from deepmd.dpmodel.model.model import get_model
from deepmd.dpmodel.utils.serialization import save_dp_model
from deepmd.infer import DeepPot

HERE = os.path.dirname(os.path.abspath(__file__))
DP = os.path.join(os.path.dirname(sys.executable), "dp")

# rcut and rcut_smth are exact in float32: DeePMD-kit's TensorFlow backend passes them to its C++
# environment-matrix op as float32 attributes, so 0.6 would become 0.60000002384 there (and TF would
# differ by ~1e-7 from dpk and from DeePMD-kit's own numpy/PyTorch backends; docs/interop.md).
CASES = {
    # 2 types, one embedding net per neighbour type, fitting with timesteps (resnet_dt).
    "tos_true": {
        "type_map": ["O", "H"],
        "descriptor": {"type": "se_e2_a", "sel": [10, 14], "rcut": 3.0, "rcut_smth": 0.5,
                       "neuron": [4, 8], "axis_neuron": 3, "type_one_side": True, "resnet_dt": False,
                       "precision": "float64", "seed": 11},
        "fitting_net": {"type": "ener", "neuron": [10, 10], "resnet_dt": True, "precision": "float64", "seed": 12},
    },
    # 3 types, one net per (centre, neighbour) pair, embedding timesteps; fitting widths where
    # DeePMD-kit's dpmodel layer defaults and its TensorFlow backend differ (8->8 first layer,
    # 8->16 doubling): TensorFlow (and dpk) skip only between equal hidden widths after the first.
    "tos_false_3types": {
        "type_map": ["C", "H", "O"],
        "descriptor": {"type": "se_e2_a", "sel": [6, 8, 6], "rcut": 3.25, "rcut_smth": 0.375,
                       "neuron": [2, 4, 4], "axis_neuron": 2, "type_one_side": False, "resnet_dt": True,
                       "precision": "float64", "seed": 21},
        "fitting_net": {"type": "ener", "neuron": [8, 8, 16], "resnet_dt": False, "precision": "float64", "seed": 22},
    },
    # float32 model (compared to DeePMD-kit's float32 graph with a float32 tolerance).
    "float32": {
        "type_map": ["O", "H"],
        "descriptor": {"type": "se_e2_a", "sel": [10, 14], "rcut": 3.0, "rcut_smth": 0.5,
                       "neuron": [4, 8], "axis_neuron": 3, "type_one_side": True, "resnet_dt": False,
                       "precision": "float32", "seed": 31},
        "fitting_net": {"type": "ener", "neuron": [10, 10], "resnet_dt": True, "precision": "float32", "seed": 32},
    },
}


def randomize(model, rng):
    """Non-trivial statistics, bias and timesteps (dpmodel starts from avg 0, std 1, bias 0)."""
    desc = model["descriptor"]
    davg = desc["@variables"]["davg"]
    dstd = desc["@variables"]["dstd"]
    ntypes = davg.shape[0]
    for t in range(ntypes):  # one (avg, std) per centre type, as DeePMD-kit's statistics give
        davg[t, :, 0] = rng.uniform(0.05, 0.4)
        dstd[t, :, 0] = rng.uniform(0.1, 0.5)
        dstd[t, :, 1:] = rng.uniform(0.05, 0.3)
    fit = model["fitting"]
    fit["@variables"]["bias_atom_e"][:] = rng.uniform(-5, -1, size=fit["@variables"]["bias_atom_e"].shape)

    def walk(x):
        if isinstance(x, dict):
            if x.get("@class") == "Layer" and x["@variables"].get("idt") is not None:
                idt = x["@variables"]["idt"]
                idt[:] = rng.normal(0.1, 0.05, size=idt.shape)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(model)


def make_system(folder, natoms, types, type_map, box, periodic, nframes, rng):
    """Random positions with a minimum distance of 0.9 A; returns coord (nframes, natoms*3)."""
    coords = []
    for _ in range(nframes):
        pos = []
        while len(pos) < natoms:
            frac = rng.uniform(0, 1, 3)
            p = frac @ box
            ok = True
            for q in pos:
                d = p - q
                if periodic:
                    s = np.linalg.solve(box.T, d)
                    d = (s - np.round(s)) @ box
                if np.linalg.norm(d) < 0.9:
                    ok = False
                    break
            if ok:
                pos.append(p)
        coords.append(np.array(pos).reshape(-1))
    os.makedirs(os.path.join(folder, "set.000"), exist_ok=True)
    with open(os.path.join(folder, "type.raw"), "w") as f:
        f.write("\n".join(str(t) for t in types) + "\n")
    with open(os.path.join(folder, "type_map.raw"), "w") as f:
        f.write("\n".join(type_map) + "\n")
    if not periodic:
        open(os.path.join(folder, "nopbc"), "w").close()
    coord = np.array(coords)
    np.save(os.path.join(folder, "set.000", "coord.npy"), coord)
    if periodic:
        np.save(os.path.join(folder, "set.000", "box.npy"), np.tile(box.reshape(1, 9), (nframes, 1)))
    return coord


def label(folder, graph, coord, types, box, periodic):
    dp = DeepPot(graph)
    nframes = coord.shape[0]
    cells = np.tile(box.reshape(1, 9), (nframes, 1)) if periodic else None
    e, f, v, ae, av = dp.eval(coord, cells, np.array(types), atomic=True)
    s = os.path.join(folder, "set.000")
    np.save(os.path.join(s, "energy.npy"), e.reshape(nframes).astype(np.float64))
    np.save(os.path.join(s, "force.npy"), f.reshape(nframes, -1).astype(np.float64))
    np.save(os.path.join(s, "virial.npy"), v.reshape(nframes, 9).astype(np.float64))
    np.save(os.path.join(s, "atom_ener.npy"), ae.reshape(nframes, -1).astype(np.float64))
    np.save(os.path.join(s, "atom_virial.npy"), av.reshape(nframes, -1).astype(np.float64))


def main():
    rng = np.random.default_rng(20261130)
    tri = np.array([[6.6, 0.0, 0.0], [1.3, 6.4, 0.0], [-0.9, 1.1, 6.8]])  # triclinic, > 2 rcut
    cube = np.eye(3) * 7.0  # only a frame of reference for the non-periodic cluster
    with tempfile.TemporaryDirectory() as tmp:
        for name, params in CASES.items():
            model = get_model(json.loads(json.dumps(params))).serialize()
            randomize(model, rng)
            seed_file = os.path.join(tmp, name + "_seed.dp")
            save_dp_model(seed_file, {"backend": "dpmodel", "model": model, "model_def_script": params})
            graph = os.path.join(tmp, name + ".pb")
            subprocess.run([DP, "convert-backend", seed_file, graph], check=True)
            for ext in (".dp", ".yaml"):
                out = os.path.join(HERE, name + ext)
                subprocess.run([DP, "convert-backend", graph, out], check=True)
            ntypes = len(params["type_map"])
            for sysname, periodic, natoms in (("triclinic", True, 12), ("nopbc", False, 9)):
                folder = os.path.join(HERE, name + "_" + sysname)
                shutil.rmtree(folder, ignore_errors=True)
                types = [i % ntypes for i in range(natoms)]
                box = tri if periodic else cube
                coord = make_system(folder, natoms, types, params["type_map"], box, periodic, 2, rng)
                label(folder, graph, coord, types, box, periodic)


if __name__ == "__main__":
    main()

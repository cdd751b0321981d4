#!/usr/bin/env python3
"""ctest eam_example_data: the labels examples/eam/make_data.py writes, checked against an
independent evaluation of the same model.

LAMMPS computes energies, forces and virials from the tabulated setfl file; zhou_eam.energy sums
the analytic functions directly in numpy. Per example (copper, alcumg), for a training and the
validation system: the energy of a frame equals zhou_eam.energy (1e-6 eV/atom), forces equal
-dE/dx by central differences of zhou_eam.energy, and the virial equals -dE/d(eps_ab) under
x -> (I + eps) x of coordinates and cell (DeePMD-kit's convention, SPEC.md section 6); the
fcc lattices' energy minima and cohesive energies are Zhou et al.'s (lattice constant sqrt(2) re).
Also the layout (type.raw, type_map.raw, frame counts, compositions) and the refused arguments.
With DPK_TRAIN: each example's own input.json trains 30 steps on its data (no neighbour beyond
sel, the training loss falls) and `dpk-train test` reads the model and the validation system.

    check_eam_data.py EXAMPLES_EAM_DIR LMP SCRATCH [DPK_TRAIN]
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

src, lmp, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
dpk_train = os.path.abspath(sys.argv[4]) if len(sys.argv) > 4 else None
sys.path.insert(0, src)
import zhou_eam  # noqa: E402
import make_data  # noqa: E402

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


# The analytic model: fcc energy minimum at a = sqrt(2) re, cohesive energies of Zhou et al.
cohesive = {"Cu": 3.54, "Al": 3.58, "Mg": 1.55}
basis = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
for name, ec in cohesive.items():
    a0 = np.sqrt(2.0) * zhou_eam.PARAMETERS[name]["re"]
    e = [zhou_eam.energy(basis * a0 * s, np.eye(3) * a0 * s, [0] * 4, [name]) / 4 for s in (0.995, 1.0, 1.005)]
    check(e[1] < e[0] and e[1] < e[2], f"{name}: fcc energy minimal at a = {a0:.4f} A ({e})")
    check(abs(e[1] + ec) < 0.01, f"{name}: cohesive energy {-e[1]:.4f} eV, Zhou et al. {ec}")

shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
frames = 2
for example, (names, systems) in make_data.EXAMPLES.items():
    out = os.path.join(scratch, example, "data")   # where the example's input.json looks
    run = subprocess.run([sys.executable, os.path.join(src, "make_data.py"), example, out, "--frames", str(frames),
                          "--lmp", lmp], capture_output=True, text=True)
    check(run.returncode == 0, f"{example}: make_data.py exit status {run.returncode} {run.stderr.strip()[-300:]}")
    if run.returncode != 0:
        continue
    for k, counts in enumerate(systems):
        d = os.path.join(out, f"data_{k}")
        types = np.loadtxt(os.path.join(d, "type.raw"), dtype=int).reshape(-1)
        check(open(os.path.join(d, "type_map.raw")).read().split() == names, f"{example} data_{k}: type_map.raw {names}")
        check(np.bincount(types, minlength=len(names)).tolist() == list(counts),
              f"{example} data_{k}: composition {np.bincount(types).tolist()} == {list(counts)}")
        arrays = {n: np.load(os.path.join(d, "set.000", n + ".npy"))
                  for n in ("box", "coord", "energy", "force", "virial")}
        shapes = {n: a.shape for n, a in arrays.items()}
        natoms = len(types)
        check(shapes == {"box": (frames, 9), "coord": (frames, 3 * natoms), "energy": (frames,),
                         "force": (frames, 3 * natoms), "virial": (frames, 9)}, f"{example} data_{k}: shapes {shapes}")
    for k in (0, len(systems) - 1):
        d = os.path.join(out, f"data_{k}")
        types = np.loadtxt(os.path.join(d, "type.raw"), dtype=int).reshape(-1)
        f = frames - 1
        coord = np.load(os.path.join(d, "set.000", "coord.npy"))[f].reshape(-1, 3)
        box = np.load(os.path.join(d, "set.000", "box.npy"))[f].reshape(3, 3)
        energy = np.load(os.path.join(d, "set.000", "energy.npy"))[f]
        force = np.load(os.path.join(d, "set.000", "force.npy"))[f].reshape(-1, 3)
        virial = np.load(os.path.join(d, "set.000", "virial.npy"))[f].reshape(3, 3)
        n = len(types)
        e0 = zhou_eam.energy(coord, box, types, names)
        check(abs(e0 - energy) / n < 1e-6, f"{example} data_{k}: energy {energy:.8f} vs analytic {e0:.8f} eV")
        check(np.abs(force).max() > 0.1, f"{example} data_{k}: forces not all small (thermal frame)")
        h = 1e-4
        worst = 0.0
        for atom in (0, n - 1):
            for a in range(3):
                plus, minus = coord.copy(), coord.copy()
                plus[atom, a] += h
                minus[atom, a] -= h
                fd = -(zhou_eam.energy(plus, box, types, names) - zhou_eam.energy(minus, box, types, names)) / (2 * h)
                worst = max(worst, abs(fd - force[atom, a]))
        check(worst < 1e-4, f"{example} data_{k}: forces = -dE/dx (largest difference {worst:.2e} eV/A)")
        worst = 0.0
        check(np.abs(virial - virial.T).max() < 1e-9, f"{example} data_{k}: virial symmetric (central forces)")
        for a in range(3):
            for b in range(a, 3):
                eps = np.zeros((3, 3))
                eps[a, b] = h
                def strained(e):
                    m = np.eye(3) + e
                    return zhou_eam.energy(coord @ m.T, box @ m.T, types, names)
                fd = -(strained(eps) - strained(-eps)) / (2 * h)
                worst = max(worst, abs(fd - virial[a, b]))
        check(worst < 1e-3, f"{example} data_{k}: virial = -dE/d(eps) (largest difference {worst:.2e} eV, "
                            f"trace {np.trace(virial):.3f})")

    if dpk_train is None:
        continue
    # the example's own input, 30 steps with an lcurve line every 10
    work = os.path.join(scratch, example)
    j = json.load(open(os.path.join(src, example, "input.json")))
    j["training"]["numb_steps"] = 30
    j["training"]["disp_freq"] = 10
    j["training"]["save_freq"] = 30
    json.dump(j, open(os.path.join(work, "input.json"), "w"))
    run = subprocess.run([dpk_train, "train", "input.json", "-o", "out"], cwd=work, capture_output=True, text=True)
    check(run.returncode == 0, f"{example}: dpk-train train exit status {run.returncode} {run.stderr.strip()[-300:]}")
    if run.returncode != 0:
        continue
    check("neighbours dropped beyond sel: 0" in run.stdout + run.stderr, f"{example}: no neighbour beyond sel {j['model']['descriptor']['sel']}")
    curve = np.loadtxt(os.path.join(work, "out", "lcurve.out"))
    check(curve.shape[0] == 4 and curve[-1, 2] < curve[0, 2],
          f"{example}: lcurve steps {curve[:, 0].tolist()}, training loss {curve[0, 2]:.3g} -> {curve[-1, 2]:.3g}")
    run = subprocess.run([dpk_train, "test", "-m", "out/model.dpk", "-s", "data/data_3"], cwd=work,
                         capture_output=True, text=True)
    rmse = re.findall(r"Force\s+RMSE\s*:\s*(\S+)", run.stdout + run.stderr)
    check(run.returncode == 0 and rmse and 0 < float(rmse[-1]) < 10,
          f"{example}: dpk-train test on data_3: exit {run.returncode}, force RMSE {rmse}")

# refused arguments name what is wrong
for args, expect in ((["copper", scratch + "/x", "--frames", "0"], "--frames 0"),
                     (["copper", scratch + "/x", "--lmp", "no-such-lammps"], "'no-such-lammps' not found"),
                     (["iron", scratch + "/x"], "invalid choice: 'iron'")):
    run = subprocess.run([sys.executable, os.path.join(src, "make_data.py")] + args, capture_output=True, text=True)
    check(run.returncode != 0 and expect in run.stderr, f"make_data.py {' '.join(args)}: refused with '{expect}'")
check(not os.path.exists(scratch + "/x"), "nothing written for refused arguments")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("all checks passed")

#!/usr/bin/env python3
"""Training data for the copper and Al-Cu-Mg examples: LAMMPS molecular dynamics on Zhou et al.'s
embedded-atom model (zhou_eam.py), frames written as deepmd/npy systems (type.raw, type_map.raw,
set.000/{box,coord,energy,force,virial}.npy; eV and Angstrom, DeePMD-kit's virial
W_ab = -dE/d(eps_ab)).

    python3 make_data.py copper|alcumg OUT_DIR [--frames N] [--seed S] [--lmp PATH]

Each example has four systems of 108 atoms (a 3x3x3 fcc cell): data_0..data_2 for training and
data_3 for validation, each N frames (default 200) from segments of NVT dynamics at 300, 600, 900
and 1200 K, each segment in a randomly strained cell (normal strains within +-3 %, shears within
+-2 %). Copper: 108 Cu. Al-Cu-Mg: Al-rich fcc solid solutions, Cu and Mg on random sites, one
composition per system (validation: one the training systems do not have). Deterministic for a
given seed (to rounding across numpy versions, whose exp and log differ in the last bit). Needs
numpy and LAMMPS' `lmp` (Debian: python3-numpy, lammps; MANYBODY's eam/alloy).
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    sys.exit("make_data.py: needs numpy (Debian: apt-get install python3-numpy; run it with /usr/bin/python3)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zhou_eam  # noqa: E402

#: bar A^3 per eV: LAMMPS' metal-unit factor between stress*volume and energy
NKTV2P = 1.6021765e6

#: element names and, per system, how many atoms of each (108 in all)
EXAMPLES = {
    "copper": (["Cu"], [(108,), (108,), (108,), (108,)]),
    "alcumg": (["Al", "Cu", "Mg"], [(96, 8, 4), (88, 8, 12), (84, 16, 8), (90, 10, 8)]),
}
TEMPERATURES = (300.0, 600.0, 900.0, 1200.0)
SEGMENT_FRAMES = 25
EQUILIBRATION_STEPS = 1000
FRAME_EVERY = 50


def fcc_sites(cells):
    basis = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
    grid = np.array([[i, j, k] for i in range(cells) for j in range(cells) for k in range(cells)], dtype=float)
    return (grid[:, None, :] + basis[None, :, :]).reshape(-1, 3) / cells   # fractional


def lammps_input(names, counts, frames, rng, work):
    """Writes atoms.data and in.md for one system into `work`; returns the type of each atom."""
    frac = fcc_sites(3)
    types = np.repeat(np.arange(len(names)), counts)
    rng.shuffle(types)
    a = sum(c * math.sqrt(2.0) * zhou_eam.PARAMETERS[n]["re"] for n, c in zip(names, counts)) / sum(counts)
    length = 3 * a
    with open(os.path.join(work, "atoms.data"), "w") as f:
        f.write(f"fcc cell, {' '.join(names)}\n\n{len(types)} atoms\n{len(names)} atom types\n")
        f.write(f"0 {length:.17g} xlo xhi\n0 {length:.17g} ylo yhi\n0 {length:.17g} zlo zhi\n0 0 0 xy xz yz\n\nMasses\n\n")
        for t, n in enumerate(names):
            f.write(f"{t + 1} {zhou_eam.PARAMETERS[n]['mass']}\n")
        f.write("\nAtoms # atomic\n\n")
        for i, (t, x) in enumerate(zip(types, frac * length)):
            f.write(f"{i + 1} {t + 1} {x[0]:.17g} {x[1]:.17g} {x[2]:.17g}\n")
    segments = -(-frames // SEGMENT_FRAMES)
    lines = []
    for s in range(segments):
        temp = TEMPERATURES[s % len(TEMPERATURES)]
        normal = 1.0 + rng.uniform(-0.03, 0.03, 3)
        shear = rng.uniform(-0.02, 0.02, 3) * length
        nframes = min(SEGMENT_FRAMES, frames - s * SEGMENT_FRAMES)
        lines += [
            "clear", "units metal", "atom_style atomic", "boundary p p p", "atom_modify map array",
            "timestep 0.001", "read_data atoms.data",
            "pair_style eam/alloy", f"pair_coeff * * potential.eam.alloy {' '.join(names)}",
            f"change_box all x scale {normal[0]:.17g} y scale {normal[1]:.17g} z scale {normal[2]:.17g} "
            f"xy final {shear[0]:.17g} xz final {shear[1]:.17g} yz final {shear[2]:.17g} remap units box",
            f"velocity all create {2 * temp} {int(rng.integers(1, 2**30))} mom yes rot no dist gaussian",
            f"fix md all nvt temp {temp} {temp} 0.1",
            f"run {EQUILIBRATION_STEPS}",
            "compute pe all pe/atom", "compute st all stress/atom NULL virial",
            f"dump frames all custom {FRAME_EVERY} frames_{s:03d}.dump id type x y z fx fy fz c_pe "
            "c_st[1] c_st[2] c_st[3] c_st[4] c_st[5] c_st[6]",
            "dump_modify frames sort id format float %.17g",
            f"run {FRAME_EVERY * (nframes - 1)}",
        ]
    with open(os.path.join(work, "in.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return types, segments


def read_dump(path):
    """Frames of a LAMMPS custom dump: (box rows (3, 3), columns (N, 14) sorted by id) each."""
    frames = []
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith("ITEM: TIMESTEP"):
            i += 1
            continue
        n = int(lines[i + 3])
        bounds = np.array([[float(v) for v in lines[i + 5 + k].split()] for k in range(3)])
        xy, xz, yz = bounds[0, 2], bounds[1, 2], bounds[2, 2]
        xlo = bounds[0, 0] - min(0.0, xy, xz, xy + xz)
        xhi = bounds[0, 1] - max(0.0, xy, xz, xy + xz)
        ylo, yhi = bounds[1, 0] - min(0.0, yz), bounds[1, 1] - max(0.0, yz)
        zlo, zhi = bounds[2, 0], bounds[2, 1]
        box = np.array([[xhi - xlo, 0, 0], [xy, yhi - ylo, 0], [xz, yz, zhi - zlo]])
        cols = np.array([[float(v) for v in line.split()] for line in lines[i + 9:i + 9 + n]])
        frames.append((box, cols))
        i += 9 + n
    return frames


def write_system(path, names, types, frames):
    """One deepmd/npy system, written beside `path` and renamed into place."""
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "set.000"))
    with open(os.path.join(tmp, "type.raw"), "w") as f:
        f.write("\n".join(str(t) for t in types) + "\n")
    with open(os.path.join(tmp, "type_map.raw"), "w") as f:
        f.write("\n".join(names) + "\n")
    box = np.array([b.reshape(9) for b, _ in frames])
    coord = np.array([c[:, 2:5].reshape(-1) for _, c in frames])
    force = np.array([c[:, 5:8].reshape(-1) for _, c in frames])
    energy = np.array([c[:, 8].sum() for _, c in frames])
    virial = []
    for _, c in frames:
        s = -c[:, 9:15].sum(axis=0) / NKTV2P   # xx yy zz xy xz yz, eV
        virial.append([s[0], s[3], s[4], s[3], s[1], s[5], s[4], s[5], s[2]])
    for name, value in (("box", box), ("coord", coord), ("force", force), ("energy", energy),
                        ("virial", np.array(virial))):
        np.save(os.path.join(tmp, "set.000", name + ".npy"), value)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


def make(example, out, frames, seed, lmp):
    names, systems = EXAMPLES[example]
    os.makedirs(out, exist_ok=True)
    zhou_eam.write_setfl(os.path.join(out, "potential.eam.alloy"), names)
    rng = np.random.default_rng(seed)
    for k, counts in enumerate(systems):
        with tempfile.TemporaryDirectory(prefix="dpk-eam-") as work:
            shutil.copy(os.path.join(out, "potential.eam.alloy"), work)
            types, segments = lammps_input(names, counts, frames, rng, work)
            run = subprocess.run([lmp, "-in", "in.md", "-log", "log.lammps", "-screen", "none"], cwd=work,
                                 capture_output=True, text=True)
            if run.returncode != 0:
                log = open(os.path.join(work, "log.lammps")).read() if os.path.exists(os.path.join(work, "log.lammps")) else ""
                sys.exit(f"make_data.py: {lmp} failed on system data_{k} (exit {run.returncode}):\n"
                         + "\n".join((run.stdout + run.stderr + log).strip().split("\n")[-8:]))
            got = []
            for s in range(segments):
                got += read_dump(os.path.join(work, f"frames_{s:03d}.dump"))
        if len(got) != frames:
            sys.exit(f"make_data.py: system data_{k}: {len(got)} frames from LAMMPS, expected {frames}")
        write_system(os.path.join(out, f"data_{k}"), names, types, got)
        print(f"make_data.py: {out}/data_{k}: {frames} frames, " +
              ", ".join(f"{c} {n}" for n, c in zip(names, counts)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("example", choices=sorted(EXAMPLES))
    parser.add_argument("out")
    parser.add_argument("--frames", type=int, default=200, help="frames per system (default 200)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lmp", default="lmp", help="the LAMMPS executable (default lmp)")
    args = parser.parse_args()
    if args.frames < 1:
        sys.exit(f"make_data.py: --frames {args.frames}: expected a positive number of frames")
    if shutil.which(args.lmp) is None:
        sys.exit(f"make_data.py: LAMMPS executable '{args.lmp}' not found (Debian: apt-get install lammps)")
    make(args.example, args.out, args.frames, args.seed, args.lmp)


if __name__ == "__main__":
    main()

"""Builds the small multi-system deepmd/npy set in this folder from DeePMD-kit's water example.

Run from the repository root with a Python that has numpy:
    python tests/data/multi_system/make_systems.py
Three systems with different atom and frame counts (whole water molecules cut out of the
192-atom box of examples/water/data; energies scaled by the atom fraction, forces kept):
  sys_a: 8 molecules (24 atoms), sets of 6 and 4 frames, periodic (frames 0-9 of data_0)
  sys_b: 4 molecules (12 atoms), one set of 5 frames, periodic (frames 0-4 of data_1)
  sys_c: 2 molecules (6 atoms), one set of 2 frames, nopbc (frames 0-1 of data_2, unwrapped)
"""
import os
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
WATER = os.path.join(HERE, "..", "..", "..", "examples", "water", "data")


def molecules(coord, box):
    """For each O (types 0), the indices of its two nearest H (minimum image)."""
    types = np.loadtxt(os.path.join(WATER, "data_0", "type.raw"), dtype=int)
    o = np.where(types == 0)[0]
    h = np.where(types == 1)[0]
    length = box[0]
    mols = []
    for i in o:
        d = coord[h] - coord[i]
        d -= length * np.round(d / length)
        near = h[np.argsort(np.linalg.norm(d, axis=1))[:2]]
        mols.append([i, *near])
    return types, mols


def cut(source, frames, nmol, periodic, sets, name):
    src = os.path.join(WATER, source, "set.000")
    coord = np.load(os.path.join(src, "coord.npy"))[frames]
    box = np.load(os.path.join(src, "box.npy"))[frames]
    energy = np.load(os.path.join(src, "energy.npy"))[frames]
    force = np.load(os.path.join(src, "force.npy"))[frames]
    types, mols = molecules(coord[0].reshape(-1, 3), box[0][[0, 4, 8]])
    first = coord[0].reshape(-1, 3)
    length = box[0][0]
    # the molecules nearest to molecule 0's oxygen (so nopbc systems have neighbours)
    d = np.array([first[m[0]] - first[mols[0][0]] for m in mols])
    d -= length * np.round(d / length)
    pick = [mols[k] for k in np.argsort(np.linalg.norm(d, axis=1))[:nmol]]
    atoms = [m[0] for m in pick] + [a for m in pick for a in m[1:]]  # O first, then H
    natoms = len(atoms)
    out = os.path.join(HERE, name)
    os.makedirs(out, exist_ok=True)
    np.savetxt(os.path.join(out, "type.raw"), types[atoms], fmt="%d")
    with open(os.path.join(out, "type_map.raw"), "w") as f:
        f.write("O\nH\n")
    c = coord.reshape(len(frames), -1, 3)[:, atoms]
    if not periodic:
        # unwrap every atom to its minimum image around the first oxygen
        for f in range(len(frames)):
            rel = c[f] - c[f, 0]
            rel -= length * np.round(rel / length)
            c[f] = c[f, 0] + rel
        open(os.path.join(out, "nopbc"), "w").close()
    fr = force.reshape(len(frames), -1, 3)[:, atoms]
    e = energy * natoms / 192.0
    start = 0
    for s, n in enumerate(sets):
        sd = os.path.join(out, "set.%03d" % s)
        os.makedirs(sd, exist_ok=True)
        sl = slice(start, start + n)
        np.save(os.path.join(sd, "coord.npy"), c[sl].reshape(n, -1))
        if periodic:
            np.save(os.path.join(sd, "box.npy"), box[sl])
        np.save(os.path.join(sd, "energy.npy"), e[sl])
        np.save(os.path.join(sd, "force.npy"), fr[sl].reshape(n, -1))
        start += n


cut("data_0", list(range(10)), 8, True, [6, 4], "sys_a")
cut("data_1", list(range(5)), 4, True, [5], "sys_b")
cut("data_2", list(range(2)), 2, False, [2], "sys_c")

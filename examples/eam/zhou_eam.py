#!/usr/bin/env python3
"""Zhou, Johnson and Wadley's embedded-atom model for alloys of Al, Cu and Mg: the analytic functions,
a LAMMPS `eam/alloy` (setfl) file of them, and an independent numpy evaluation of energy, forces
and virial used by the tests to check the labels that LAMMPS produces.

Functions and parameters: X. W. Zhou, R. A. Johnson, H. N. G. Wadley, Phys. Rev. B 69, 144113
(2004), eqs. (1)-(6) and Table III (NOTICE beside this file):
  density     f(r)    = fe exp(-beta (r/re - 1)) / (1 + (r/re - lam)^20)
  pair        phi(r)  = A exp(-alpha (r/re - 1)) / (1 + (r/re - kappa)^20) - B exp(-beta (r/re - 1)) / (1 + (r/re - lam)^20)
  cross pair  phi_ab  = (f_b / f_a phi_aa + f_a / f_b phi_bb) / 2
  embedding   F(rho)  = sum_i Fn_i (rho/rho_n - 1)^i  for rho < rho_n = 0.85 rho_e
                      = sum_i F_i  (rho/rho_e - 1)^i  for rho_n <= rho < rho_o = 1.15 rho_e
                      = Fe (1 - eta ln(rho/rho_s)) (rho/rho_s)^eta  above

    python3 zhou_eam.py OUT.eam.alloy Al Cu Mg     # writes the setfl file for those elements
"""
import math
import sys

import numpy as np

#: Table III of Zhou et al. (2004); mass in g/mol, Z the atomic number.
PARAMETERS = {
    "Cu": dict(re=2.556162, fe=1.554485, rhoe=21.175871, rhos=21.175395, alpha=8.127620, beta=4.334731,
               A=0.396620, B=0.548085, kappa=0.308782, lam=0.756515,
               Fn=(-2.170269, -0.263788, 1.088878, -0.817603), F=(-2.19, 0.0, 0.561830, -2.100595),
               eta=0.310490, Fe=-2.186568, Z=29, mass=63.546),
    "Al": dict(re=2.863924, fe=1.403115, rhoe=20.418205, rhos=23.195740, alpha=6.613165, beta=3.527021,
               A=0.314873, B=0.365551, kappa=0.379846, lam=0.759692,
               Fn=(-2.807602, -0.301435, 1.258562, -1.247604), F=(-2.83, 0.0, 0.622245, -2.488244),
               eta=0.785902, Fe=-2.824528, Z=13, mass=26.981539),
    "Mg": dict(re=3.196291, fe=0.544323, rhoe=7.132600, rhos=7.132600, alpha=10.228708, beta=5.455311,
               A=0.137518, B=0.225930, kappa=0.5, lam=1.0,
               Fn=(-0.896473, -0.044291, 0.162232, -0.689950), F=(-0.90, 0.0, 0.122838, -0.226010),
               eta=0.431425, Fe=-0.899702, Z=12, mass=24.305),
}


def element(name):
    """The parameters of `name`, or an error naming the elements this model has."""
    if name not in PARAMETERS:
        sys.exit(f"zhou_eam.py: no parameters for element '{name}' (have: {', '.join(sorted(PARAMETERS))})")
    return PARAMETERS[name]


def density(p, r):
    """f(r): the electron density an atom of parameters p contributes at distance r."""
    x = r / p["re"]
    return p["fe"] * np.exp(-p["beta"] * (x - 1.0)) / (1.0 + (x - p["lam"]) ** 20)


def pair(pa, pb, r):
    """phi_ab(r); the alloy rule of eq. (6) when pa is not pb."""
    def own(p):
        x = r / p["re"]
        return (p["A"] * np.exp(-p["alpha"] * (x - 1.0)) / (1.0 + (x - p["kappa"]) ** 20)
                - p["B"] * np.exp(-p["beta"] * (x - 1.0)) / (1.0 + (x - p["lam"]) ** 20))
    if pa is pb:
        return own(pa)
    fa, fb = density(pa, r), density(pb, r)
    return 0.5 * (fb / fa * own(pa) + fa / fb * own(pb))


def embedding(p, rho):
    """F(rho), piecewise as in eq. (5); rho >= 0."""
    rho = np.asarray(rho, dtype=float)
    rn, ro = 0.85 * p["rhoe"], 1.15 * p["rhoe"]
    low = sum(c * (rho / rn - 1.0) ** i for i, c in enumerate(p["Fn"]))
    mid = sum(c * (rho / p["rhoe"] - 1.0) ** i for i, c in enumerate(p["F"]))
    with np.errstate(divide="ignore", invalid="ignore"):
        y = rho / p["rhos"]
        high = p["Fe"] * (1.0 - p["eta"] * np.log(y)) * y ** p["eta"]
    return np.where(rho < rn, low, np.where(rho < ro, mid, high))


def cutoff(names):
    """The radius at which the setfl tables end: 3 re of the largest atom, where every density and
    pair function of these elements is below 1e-10, so the jump of the truncated sums is far below
    the labels' precision (energies, forces and virials stay each other's derivatives)."""
    return 3.0 * max(element(n)["re"] for n in names)


def write_setfl(path, names, nr=10000, nrho=10000):
    """LAMMPS `pair_style eam/alloy` file for the elements `names` (in LAMMPS type order)."""
    ps = [element(n) for n in names]
    rc = cutoff(names)
    dr = rc / (nr - 1)
    r = np.maximum(np.arange(nr) * dr, 0.5)   # the functions diverge at r -> 0; never sampled there
    rho_max = 3.0 * max(p["rhoe"] for p in ps)
    drho = rho_max / (nrho - 1)
    rho = np.arange(nrho) * drho
    rho[0] = 1e-12

    def block(values):
        return "\n".join(" ".join(f"{v:.16e}" for v in values[i:i + 5]) for i in range(0, len(values), 5))

    lines = ["Zhou, Johnson, Wadley, Phys. Rev. B 69, 144113 (2004): EAM for " + " ".join(names),
             "written by dpk examples/eam/zhou_eam.py from the analytic functions",
             "metal units (eV, Angstrom)",
             f"{len(names)} " + " ".join(names),
             f"{nrho} {drho:.16e} {nr} {dr:.16e} {rc:.16e}"]
    for n, p in zip(names, ps):
        lines.append(f"{p['Z']} {p['mass']} {math.sqrt(2.0) * p['re']:.6f} fcc")
        lines.append(block(embedding(p, rho)))
        lines.append(block(density(p, r)))
    for i, pi in enumerate(ps):
        for pj in ps[:i + 1]:
            lines.append(block(r * pair(pi, pj, r)))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    import os
    os.replace(tmp, path)


def energy(coord, box, types, names):
    """Total energy (eV) of one periodic frame: coord (N, 3) in A, box (3, 3) with lattice vectors
    as rows, types (N,) indices into names. Plain numpy over every image within the cutoff."""
    ps = [element(n) for n in names]
    rc = cutoff(names)
    coord = np.asarray(coord, dtype=float)
    box = np.asarray(box, dtype=float)
    types = np.asarray(types)
    # images needed along each lattice vector: rc over the distance between opposite faces
    inv = np.linalg.inv(box)
    heights = 1.0 / np.linalg.norm(inv, axis=0)
    reach = [int(math.ceil(rc / h)) for h in heights]
    shifts = np.array([[i, j, k] for i in range(-reach[0], reach[0] + 1) for j in range(-reach[1], reach[1] + 1)
                       for k in range(-reach[2], reach[2] + 1)], dtype=float) @ box
    d = coord[None, :, None, :] + shifts[None, None, :, :] - coord[:, None, None, :]   # (i, j, image, 3)
    r = np.linalg.norm(d, axis=-1)
    inside = (r < rc) & (r > 1e-9)
    rho = np.zeros(len(coord))
    e_pair = 0.0
    for a, pa in enumerate(ps):
        for b, pb in enumerate(ps):
            mask = inside & (types[:, None, None] == a) & (types[None, :, None] == b)
            rs = r[mask]
            if rs.size == 0:
                continue
            e_pair += 0.5 * pair(pa, pb, rs).sum()
            rho += np.where(mask, density(pb, np.where(mask, r, 1.0)), 0.0).sum(axis=(1, 2))
    e_embed = sum(embedding(ps[t], rho[i]) for i, t in enumerate(types))
    return float(e_pair + e_embed)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    write_setfl(sys.argv[1], sys.argv[2:])

#!/usr/bin/env python3
"""Writes one frame of a deepmd/npy system as a LAMMPS data file (atom_style atomic, metal
units): atom types 1, 2, ... in the order of the system's type_map.raw, masses by element.
Needs only the Python standard library (reads .npy itself).

usage: deepmd_to_lammps.py SYSTEM_DIR OUTPUT.data [--frame F]
The cell must be orthogonal or in LAMMPS' restricted triclinic form (a along x, b in the xy
plane); water's boxes are orthogonal."""
import argparse
import ast
import glob
import os
import struct
import sys

MASS = {"H": 1.008, "C": 12.011, "N": 14.007, "O": 15.999, "Na": 22.990, "Cl": 35.45}


def read_npy(path):
    with open(path, "rb") as f:
        if f.read(6) != b"\x93NUMPY":
            sys.exit(f"{path}: not a .npy file")
        major = f.read(2)[0]
        (hlen,) = struct.unpack("<H" if major == 1 else "<I", f.read(2 if major == 1 else 4))
        header = ast.literal_eval(f.read(hlen).decode("latin1"))
        code = {"<f4": "f", "<f8": "d"}.get(header["descr"])
        if code is None or header["fortran_order"]:
            sys.exit(f"{path}: expected little-endian float32/float64 in C order, got {header}")
        count = 1
        for n in header["shape"]:
            count *= n
        data = struct.unpack(f"<{count}{code}", f.read(count * struct.calcsize(code)))
        return list(data), header["shape"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("system")
    p.add_argument("output")
    p.add_argument("--frame", type=int, default=0)
    a = p.parse_args()
    types = [int(t) for t in open(os.path.join(a.system, "type.raw")).read().split()]
    names = open(os.path.join(a.system, "type_map.raw")).read().split()
    frame = a.frame
    for set_dir in sorted(glob.glob(os.path.join(a.system, "set.*"))):
        coord, shape = read_npy(os.path.join(set_dir, "coord.npy"))
        if frame < shape[0]:
            box, _ = read_npy(os.path.join(set_dir, "box.npy"))
            break
        frame -= shape[0]
    else:
        sys.exit(f"{a.system}: no frame {a.frame}")
    n = len(types)
    x = coord[3 * n * frame: 3 * n * (frame + 1)]
    b = box[9 * frame: 9 * (frame + 1)]
    if abs(b[1]) + abs(b[2]) + abs(b[5]) > 0:
        sys.exit("the cell is not in LAMMPS' restricted triclinic form (a along x, b in the xy plane)")
    tilted = abs(b[3]) + abs(b[6]) + abs(b[7]) > 0
    with open(a.output, "w") as out:
        out.write(f"LAMMPS data file: frame {a.frame} of {a.system} (types {' '.join(names)})\n\n")
        out.write(f"{n} atoms\n{len(names)} atom types\n\n")
        out.write(f"0 {b[0]!r} xlo xhi\n0 {b[4]!r} ylo yhi\n0 {b[8]!r} zlo zhi\n")
        if tilted:
            out.write(f"{b[3]!r} {b[6]!r} {b[7]!r} xy xz yz\n")
        out.write("\nMasses\n\n")
        for t, name in enumerate(names):
            out.write(f"{t + 1} {MASS[name]}  # {name}\n")
        out.write("\nAtoms  # atomic\n\n")
        for i in range(n):
            out.write(f"{i + 1} {types[i] + 1} {x[3 * i]!r} {x[3 * i + 1]!r} {x[3 * i + 2]!r}\n")


if __name__ == "__main__":
    main()

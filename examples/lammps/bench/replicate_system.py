#!/usr/bin/env python3
"""Writes frame 0 of a deepmd/npy system replicated n x n x n times as a new one-frame
deepmd/npy system (float64 coord.npy and box.npy, zero energy.npy and force.npy, type.raw,
type_map.raw), for dpk-md benchmarks of large boxes. Standard library only. Orthogonal cells.

usage: replicate_system.py SYSTEM_DIR N OUTPUT_DIR"""
import ast
import os
import struct
import sys


def read_npy(path):
    with open(path, "rb") as f:
        assert f.read(6) == b"\x93NUMPY", path
        major = f.read(2)[0]
        (hlen,) = struct.unpack("<H" if major == 1 else "<I", f.read(2 if major == 1 else 4))
        header = ast.literal_eval(f.read(hlen).decode("latin1"))
        code = {"<f4": "f", "<f8": "d"}[header["descr"]]
        count = 1
        for n in header["shape"]:
            count *= n
        return list(struct.unpack(f"<{count}{code}", f.read(count * struct.calcsize(code))))


def write_npy(path, values, shape):
    header = f"{{'descr': '<f8', 'fortran_order': False, 'shape': {tuple(shape)!r}, }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack(f"<{len(values)}d", *values))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    types = open(os.path.join(src, "type.raw")).read().split()
    natoms = len(types)
    coord = read_npy(os.path.join(src, "set.000", "coord.npy"))[: 3 * natoms]
    box = read_npy(os.path.join(src, "set.000", "box.npy"))[:9]
    if any(box[k] != 0 for k in (1, 2, 3, 5, 6, 7)):
        sys.exit("replicate_system.py: orthogonal cells only")
    new_coord, new_types = [], []
    for i in range(n):
        for j in range(n):
            for k in range(n):
                shift = (i * box[0], j * box[4], k * box[8])
                for a in range(natoms):
                    new_coord += [coord[3 * a + d] + shift[d] for d in range(3)]
                new_types += types
    os.makedirs(os.path.join(out, "set.000"), exist_ok=True)
    write_npy(os.path.join(out, "set.000", "coord.npy"), new_coord, (1, 3 * natoms * n ** 3))
    write_npy(os.path.join(out, "set.000", "box.npy"), [b * n for b in box], (1, 9))
    # Labels are required by the reader; zeros (dpk-md does not use them).
    write_npy(os.path.join(out, "set.000", "energy.npy"), [0.0], (1,))
    write_npy(os.path.join(out, "set.000", "force.npy"), [0.0] * len(new_coord), (1, len(new_coord)))
    with open(os.path.join(out, "type.raw"), "w") as f:
        f.write("\n".join(new_types) + "\n")
    with open(os.path.join(src, "type_map.raw")) as f, open(os.path.join(out, "type_map.raw"), "w") as g:
        g.write(f.read())
    print(f"{out}: {natoms * n ** 3} atoms")


if __name__ == "__main__":
    main()

"""Shared pieces of the reliability tests: independent readers for a dpk model/checkpoint file
checked against docs/model-format.md (framing, JSON header, data size, end marker, FNV-1a
checksum) and the `checkpoint` pointer file, and the small water input.json they train. Pure
Python (no numpy), so that the tests need only python3."""
import json
import os
import struct
import subprocess

FNV_BASIS = 14695981039346656037
FNV_PRIME = 1099511628211
MASK = (1 << 64) - 1


def fnv1a64(data):
    h = FNV_BASIS
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK
    return h


def check_model_file(path):
    """Returns the JSON header of the complete, intact dpk file `path`; raises ValueError
    naming what is wrong otherwise."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 20 or data[:8] != b"DPKMODEL":
        raise ValueError("%s: no DPKMODEL magic (%d bytes)" % (path, len(data)))
    version, header_length = struct.unpack("<IQ", data[8:20])
    if version != 1 or header_length > len(data) - 20:
        raise ValueError("%s: version %d, header length %d" % (path, version, header_length))
    header = json.loads(data[20:20 + header_length].decode("utf-8"))
    start = 20 + header_length
    start += (-start) % 8
    size = int(header["data_bytes"])
    if len(data) != start + size + 8:
        raise ValueError("%s: %d bytes, expected %d" % (path, len(data), start + size + 8))
    if data[start + size:] != b"DPKEND01":
        raise ValueError("%s: no DPKEND01 end marker" % path)
    if str(fnv1a64(data[start:start + size])) != str(header["data_checksum_fnv1a64"]):
        raise ValueError("%s: data checksum mismatch" % path)
    return header


def pointer_target(folder):
    """The checkpoint file the `checkpoint` pointer of `folder` names, or None without one."""
    pointer = os.path.join(folder, "checkpoint")
    if not os.path.exists(pointer):
        return None
    with open(pointer) as f:
        name = f.read()
    if not name.endswith("\n") or "\n" in name[:-1]:
        raise ValueError("%s: not one complete line: %r" % (pointer, name))
    return os.path.join(folder, name[:-1])


def write_small_water_input(path, data, systems, numb_steps, save_freq, decay_steps=50, validation=None):
    """Writes a fast water input.json (a 4-8 embedding, 8-8 fitting net, batch 1, lcurve every
    step) to `path`: training on `systems` (names below `data`), optionally validated on
    `validation` (one batch)."""
    training = {
        "training_data": {"systems": [os.path.join(data, s) for s in systems], "batch_size": 1},
        "numb_steps": numb_steps, "seed": 10, "disp_file": "lcurve.out", "disp_freq": 1, "save_freq": save_freq,
    }
    if validation:
        training["validation_data"] = {"systems": [os.path.join(data, validation)], "batch_size": 1, "numb_btch": 1}
    config = {
        "model": {
            "type_map": ["O", "H"],
            "descriptor": {"type": "se_e2_a", "sel": [16, 32], "rcut_smth": 0.5, "rcut": 4.0, "neuron": [4, 8],
                           "resnet_dt": False, "axis_neuron": 4, "type_one_side": True, "seed": 1},
            "fitting_net": {"neuron": [8, 8], "resnet_dt": True, "seed": 1},
        },
        "learning_rate": {"type": "exp", "decay_steps": decay_steps, "start_lr": 0.001, "stop_lr": 1e-5},
        "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1,
                 "start_pref_v": 0, "limit_pref_v": 0},
        "training": training,
    }
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def preload(shim, program):
    """LD_PRELOAD value that puts `shim` in front of `program`'s libraries. A program built with
    AddressSanitizer (the `debug` preset) must have the ASan runtime first in the list, else it
    refuses to start; the shim then comes right after it (ASan's interceptors call the next
    definition of write/fsync/rename, the shim's)."""
    try:
        listing = subprocess.run(["ldd", program], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 universal_newlines=True).stdout
    except OSError:
        return shim
    for line in listing.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("libasan.so") and len(parts) >= 3 and parts[1] == "=>":
            return parts[2] + ":" + shim
    return shim

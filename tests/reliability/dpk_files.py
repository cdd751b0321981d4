"""Independent readers for the reliability tests: a dpk model/checkpoint file checked against
docs/model-format.md (framing, JSON header, data size, end marker, FNV-1a checksum), and the
`checkpoint` pointer file. Pure Python (no numpy), so that the tests need only python3."""
import json
import os
import struct

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

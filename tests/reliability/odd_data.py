#!/usr/bin/env python3
"""Odd but valid data (and two invalid inputs) through `dpk-train train` / `test`
(docs/reliability.md). Systems are written here (deepmd/npy, pure Python, no numpy).

  odd_data.py DPK_TRAIN WORK_DIR [case ...]

Each case runs dpk-train and checks its exit status, a message in its output and the files
it wrote (lcurve.out lines finite and one per step; model.dpk intact). Exit status 0 when
every case holds."""
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dpk_files  # noqa: E402

ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_PROC_BIND="false", DPK_THREAD_DEFAULTS="0")
FAILURES = []
RCUT = 4.0


def write_npy(path, shape, values):
    dims = "".join("%d, " % s for s in shape) if len(shape) > 1 else "%d," % shape[0]
    d = "{'descr': '<f8', 'fortran_order': False, 'shape': (%s), }" % dims
    d += " " * ((64 - (11 + len(d)) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode())
        f.write(struct.pack("<%dd" % len(values), *values))


def cube(length):
    return [length, 0, 0, 0, length, 0, 0, 0, length]


def spread_atoms(n, length, rng, min_distance=1.0):
    """n positions in a cube of side `length`, pairwise (periodic) distances >= min_distance."""
    out = []
    while len(out) < n:
        p = [rng.uniform(0, length) for _ in range(3)]
        ok = True
        for q in out:
            d = [(a - b) - length * round((a - b) / length) for a, b in zip(p, q)]
            ok = ok and math.sqrt(sum(x * x for x in d)) >= min_distance
        if ok:
            out.append(p)
    return [x for p in out for x in p]


def write_system(path, names, types, coords, boxes, virial=None, nopbc=False, seed=0):
    rng = random.Random(seed)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(os.path.join(path, "set.000"))
    with open(os.path.join(path, "type_map.raw"), "w") as f:
        f.write("\n".join(names) + "\n")
    with open(os.path.join(path, "type.raw"), "w") as f:
        f.write("\n".join(map(str, types)) + "\n")
    if nopbc:
        open(os.path.join(path, "nopbc"), "w").close()
    n, nf = len(types), len(coords)
    energy = [sum(-90.0 if names[t] == "O" else -180.0 for t in types) / 10 + rng.uniform(-0.1, 0.1) for _ in coords]
    write_npy(os.path.join(path, "set.000", "coord.npy"), (nf, 3 * n), [x for c in coords for x in c])
    write_npy(os.path.join(path, "set.000", "box.npy"), (nf, 9), [x for b in boxes for x in b])
    write_npy(os.path.join(path, "set.000", "energy.npy"), (nf,), energy)
    write_npy(os.path.join(path, "set.000", "force.npy"), (nf, 3 * n), [rng.uniform(-1, 1) for _ in range(nf * 3 * n)])
    if virial is not None:
        write_npy(os.path.join(path, "set.000", "virial.npy"), (nf, 9), [x for v in virial for x in v])
    return path


def random_system(path, names, types, nframes, length, seed, **kw):
    rng = random.Random(seed)
    coords = [spread_atoms(len(types), length, rng) for _ in range(nframes)]
    return write_system(path, names, types, coords, [cube(length)] * nframes, seed=seed, **kw)


def input_json(path, systems, steps=4, batch_size=1, sel=(16, 32), validation=None, pref_v=0, extra=None):
    config = {
        "model": {
            "type_map": ["O", "H"],
            "descriptor": {"type": "se_e2_a", "sel": list(sel), "rcut_smth": 0.5, "rcut": RCUT, "neuron": [4, 8],
                           "resnet_dt": False, "axis_neuron": 4, "type_one_side": True, "seed": 1},
            "fitting_net": {"neuron": [8, 8], "resnet_dt": True, "seed": 1}},
        "learning_rate": {"type": "exp", "decay_steps": 5, "start_lr": 0.001, "stop_lr": 1e-5},
        "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1,
                 "start_pref_v": pref_v, "limit_pref_v": pref_v},
        "training": {"training_data": {"systems": systems, "batch_size": batch_size},
                     "numb_steps": steps, "seed": 10, "disp_file": "lcurve.out", "disp_freq": 1, "save_freq": 2}}
    if validation:
        config["training"]["validation_data"] = {"systems": validation, "batch_size": 1, "numb_btch": 1}
    if extra:
        extra(config)
    with open(path, "w") as f:
        json.dump(config, f, indent=1)
    return path


def run(command):
    t = time.monotonic()
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), time.monotonic() - t


def check(case, condition, what, output=""):
    if not condition:
        FAILURES.append(case)
        print("odd_data: %s: FAIL: %s%s" % (case, what, "\n" + output if output else ""), flush=True)
    return condition


def trained(case, out, rc, text, steps):
    """rc 0, lcurve.out with one finite line per step 0..steps, model.dpk intact."""
    if not check(case, rc == 0, "exit status %d, expected 0" % rc, text):
        return False
    with open(os.path.join(out, "lcurve.out")) as f:
        lines = f.read().splitlines()
    rows = [line.split() for line in lines[1:]]
    ok = check(case, [int(r[0]) for r in rows] == list(range(steps + 1)), "lcurve.out steps %s" % [r[0] for r in rows])
    ok = check(case, all(math.isfinite(float(x)) for r in rows for x in r[1:]), "non-finite lcurve values",
               "\n".join(lines)) and ok
    try:
        dpk_files.check_model_file(os.path.join(out, "model.dpk"))
    except Exception as e:  # noqa: BLE001
        ok = check(case, False, "model.dpk: %s" % e) and ok
    return ok


def neighbour_counts(types, coords, box, rcut):
    """Max neighbours of each type within rcut (periodic, all images), brute force."""
    n = len(types)
    length = box[0]
    reach = int(math.ceil(rcut / length))
    best = [0, 0]
    for i in range(n):
        count = [0, 0]
        for j in range(n):
            for a in range(-reach, reach + 1):
                for b in range(-reach, reach + 1):
                    for c in range(-reach, reach + 1):
                        if i == j and a == b == c == 0:
                            continue
                        d = [coords[3 * j + k] + s * length - coords[3 * i + k] for k, s in enumerate((a, b, c))]
                        if d[0] * d[0] + d[1] * d[1] + d[2] * d[2] < rcut * rcut:
                            count[types[j]] += 1
        best = [max(x, y) for x, y in zip(best, count)]
    return best


def main():
    dpk_train, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    only = set(sys.argv[3:])
    t0 = time.monotonic()
    os.makedirs(work, exist_ok=True)

    def case_dir(name):
        d = os.path.join(work, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        return d

    def train(d, config, *extra):
        out = os.path.join(d, "out")
        rc, text, seconds = run([dpk_train, "train", config, "--output", out] + list(extra))
        return out, rc, text, seconds

    def report(name, ok, seconds, what):
        if ok:
            print("odd_data: %s: ok (%.1f s): %s" % (name, seconds, what), flush=True)

    cases = {}

    def case(fn):
        cases[fn.__name__] = fn
        return fn

    @case
    def mixed_systems(name):
        # Different atom counts and element subsets: O2H4 (O, H), H5 (type_map.raw has only H),
        # OH3 written with the reversed type_map.raw [H, O].
        d = case_dir(name)
        a = random_system(os.path.join(d, "o2h4"), ["O", "H"], [0, 0, 1, 1, 1, 1], 3, 6.0, 1)
        b = random_system(os.path.join(d, "h5"), ["H"], [0] * 5, 2, 6.0, 2)
        c = random_system(os.path.join(d, "oh3"), ["H", "O"], [1, 0, 0, 0], 3, 6.0, 3)
        out, rc, text, s = train(d, input_json(os.path.join(d, "input.json"), [a, b, c], steps=6))
        ok = trained(name, out, rc, text, 6)
        for natoms, path in ((6, a), (5, b), (4, c)):
            ok = check(name, re.search(r"dpk-train: +%d +1 .* %s\n" % (natoms, re.escape(path)), text) is not None,
                       "no summary row of %d atoms for %s" % (natoms, path), text) and ok
        rc2, text2, _ = run([dpk_train, "test", "-m", os.path.join(out, "model.dpk"), "-s", b])
        ok = check(name, rc2 == 0 and "# number of test data : 2" in text2, "dpk-train test on H5 failed", text2) and ok
        report(name, ok, s, "3 systems of 6/5/4 atoms, element subsets, trained 6 steps; dpk-train test on H5")

    @case
    def single_frame(name):
        d = case_dir(name)
        a = random_system(os.path.join(d, "one"), ["O", "H"], [0, 1, 1], 1, 5.0, 4)
        out, rc, text, s = train(d, input_json(os.path.join(d, "input.json"), [a], steps=5, validation=[a]))
        ok = trained(name, out, rc, text, 5)
        report(name, ok, s, "a 1-frame system for training and validation, 5 steps")

    @case
    def zero_virial(name):
        d = case_dir(name)
        rng = random.Random(5)
        coords = [spread_atoms(6, 6.0, rng) for _ in range(3)]
        a = write_system(os.path.join(d, "zv"), ["O", "H"], [0, 0, 1, 1, 1, 1], coords, [cube(6.0)] * 3,
                         virial=[[0.0] * 9] * 3)
        out, rc, text, s = train(d, input_json(os.path.join(d, "input.json"), [a], steps=4, pref_v=1))
        ok = trained(name, out, rc, text, 4)
        with open(os.path.join(out, "lcurve.out")) as f:
            header = f.readline()
        ok = check(name, "rmse_v_trn" in header, "no rmse_v_trn column: %s" % header) and ok
        report(name, ok, s, "virial labels all 0 with pref_v 1: trains, rmse_v column finite")

    @case
    def small_box(name):
        # A 2.5 A box with rcut 4: each atom sees its own images (up to 20 of them).
        d = case_dir(name)
        a = random_system(os.path.join(d, "small"), ["O", "H"], [0, 1], 2, 2.5, 6)
        out, rc, text, s = train(d, input_json(os.path.join(d, "input.json"), [a], steps=4, sel=(40, 40)))
        ok = trained(name, out, rc, text, 4)
        ok = check(name, "neighbours dropped beyond sel: 0\n" in text, "neighbours dropped", text) and ok
        report(name, ok, s, "2 atoms in a 2.5 A box (rcut 4: periodic images as neighbours)")

    @case
    def large_box(name):
        # A cluster of 6 atoms in a 10^6 A periodic box, and the same as nopbc.
        d = case_dir(name)
        rng = random.Random(7)
        coords = [[x + 500000.0 for x in spread_atoms(6, 5.0, rng)] for _ in range(2)]
        a = write_system(os.path.join(d, "large"), ["O", "H"], [0, 0, 1, 1, 1, 1], coords, [cube(1e6)] * 2)
        out, rc, text, s = train(d, input_json(os.path.join(d, "input.json"), [a], steps=4))
        ok = trained(name, out, rc, text, 4)
        report(name, ok, s, "6 atoms in a 1e6 A box")

    @case
    def atoms_at_rcut(name):
        # Frame 0: O and H exactly rcut apart; frame 1: 0.5 A beyond. Both see no neighbour, so
        # the predicted energies are equal and the forces 0.
        d = case_dir(name)
        coords = [[5.0, 5.0, 5.0, 5.0 + RCUT, 5.0, 5.0], [5.0, 5.0, 5.0, 5.5 + RCUT, 5.0, 5.0]]
        a = write_system(os.path.join(d, "pair"), ["O", "H"], [0, 1], coords, [cube(20.0)] * 2)
        out, rc, text, s = train(d, input_json(os.path.join(d, "input.json"), [a], steps=2))
        ok = trained(name, out, rc, text, 2)
        prefix = os.path.join(d, "detail")
        rc2, text2, _ = run([dpk_train, "test", "-m", os.path.join(out, "model.dpk"), "-s", a, "-d", prefix])
        ok = check(name, rc2 == 0, "dpk-train test failed", text2) and ok
        if ok:
            with open(prefix + ".e.out") as f:
                e = [float(line.split()[1]) for line in f if not line.startswith("#")]
            with open(prefix + ".f.out") as f:
                forces = [abs(float(x)) for line in f if not line.startswith("#") for x in line.split()[3:]]
            ok = check(name, len(e) == 2 and e[0] == e[1], "energies at rcut and beyond differ: %s" % e) and ok
            ok = check(name, max(forces) == 0.0, "forces not 0: %s" % forces) and ok
            report(name, ok, s, "pair at exactly rcut: energy %r equals the pair 0.5 A beyond, forces 0" % e[0])

    @case
    def overlapping_atoms(name):
        # Frame 1 of 3: atom 4 sits exactly on atom 2.
        d = case_dir(name)
        rng = random.Random(8)
        coords = [spread_atoms(6, 6.0, rng) for _ in range(3)]
        coords[1][12:15] = coords[1][6:9]
        a = write_system(os.path.join(d, "overlap"), ["O", "H"], [0, 0, 1, 1, 1, 1], coords, [cube(6.0)] * 3)
        out, rc, text, s = train(d, input_json(os.path.join(d, "input.json"), [a], steps=4))
        message = ("dpk-train: error: system '%s' frame 1 (frame 1 of set.000): atoms 2 and 4 are 0 A apart "
                   "(closer than 1e-06 A)" % a)
        ok = check(name, rc == 1 and message in text, "status %d, expected 1 and '%s'" % (rc, message), text)
        ok = check(name, "nan" not in text.lower(), "NaN in the output", text) and ok
        ok = check(name, not os.path.exists(os.path.join(out, "model.dpk")), "a model was written") and ok
        report(name, ok, s, message)

    @case
    def overlapping_atoms_late_frame(name):
        # Coincident atoms in the last of 3000 frames of the second of two systems, through the
        # periodic image (atom 1 one box length from atom 0 along y); 3 batches of size 1 (steps
        # 0-2) and the 10 statistics batches of each system draw at most 23 of the 3010 frames
        # (1 in 300 of the bad system's). The system is refused when it
        # is read, before the statistics, naming the system, the frame and the atoms; the
        # validation system is read the same way. (Before: found only if a batch drew the frame.)
        d = case_dir(name)
        rng = random.Random(12)
        good = random_system(os.path.join(d, "good"), ["O", "H"], [0, 1, 1], 10, 6.0, 13)
        nframes = 3000
        coords = [spread_atoms(3, 6.0, rng) for _ in range(nframes)]
        last = coords[-1]
        last[3:6] = [last[0], last[1] + 6.0, last[2]]
        a = write_system(os.path.join(d, "late"), ["O", "H"], [0, 1, 1], coords, [cube(6.0)] * nframes)
        config = input_json(os.path.join(d, "input.json"), [good, a], steps=2)
        out, rc, text, s = train(d, config)
        message = ("dpk-train: error: system '%s' frame %d (frame %d of set.000): atoms 0 and 1 are "
                   % (a, nframes - 1, nframes - 1))
        lines = [line for line in text.splitlines() if line.startswith(message)]
        ok = check(name, rc == 1 and len(lines) == 1, "status %d, expected 1 and one line '%s...'" % (rc, message), text)
        ok = check(name, lines and lines[0].endswith("(closer than 1e-06 A): coincident atoms make the descriptor "
                                                    "(1/r) infinite; remove or fix the frame"),
                   "the line does not end with the reason", text) and ok
        ok = check(name, "dpk-train: step" not in text and not os.path.exists(os.path.join(out, "lcurve.out")),
                   "training started", text) and ok
        # The same frames as validation data only: refused too.
        config = input_json(os.path.join(d, "input_validation.json"), [good], steps=2, validation=[a])
        out2, rc2, text2, _ = train(d, config)
        ok = check(name, rc2 == 1 and message in text2, "validation: status %d, expected 1 and '%s'" % (rc2, message),
                   text2) and ok
        # And with the frame repaired (atom 1 moved 1.5 A away) the same run trains.
        last[4] += 1.5
        write_system(a, ["O", "H"], [0, 1, 1], coords, [cube(6.0)] * nframes)
        shutil.rmtree(out, ignore_errors=True)
        out3, rc3, text3, _ = train(d, input_json(os.path.join(d, "input.json"), [good, a], steps=2))
        ok = trained(name, out3, rc3, text3, 2) and ok
        report(name, ok, s, lines[0] if lines else "")

    @case
    def sel_too_small(name):
        # 14 atoms in a 5.5 A box, sel [2, 4]: the warning names the sel the data need
        # (counted here by brute force over both frames: all the training frames).
        d = case_dir(name)
        rng = random.Random(9)
        types = [0] * 5 + [1] * 9
        coords = [spread_atoms(len(types), 5.5, rng, 0.9) for _ in range(2)]
        a = write_system(os.path.join(d, "dense"), ["O", "H"], types, coords, [cube(5.5)] * 2)
        need = [max(x) for x in zip(*(neighbour_counts(types, c, cube(5.5), RCUT) for c in coords))]
        out, rc, text, s = train(d, input_json(os.path.join(d, "input.json"), [a], steps=2, sel=(2, 4)))
        ok = trained(name, out, rc, text, 2)
        warning = ("dpk-train: warning: descriptor.sel [2, 4] is too small for these data: the 2 training frames have "
                   "up to [%d, %d] neighbours of each type within rcut 4 A" % tuple(need))
        found = [line for line in text.splitlines() if line.startswith(warning)]
        ok = check(name, len(found) == 1, "no line starting with '%s'" % warning, text) and ok
        ok = check(name, found and "use sel >= [%d, %d]" % tuple(need) in found[0], "no 'use sel >= ...'") and ok
        ok = check(name, found and 0 <= text.find(found[0]) < text.find("dpk-train: step 1/"),
                   "the warning is not printed before training") and ok
        # Runs that start from a checkpoint (--restart) or a model (--init-model) compute no
        # statistics; they check the same number of batches of each system (here: both frames)
        # and warn the same way, before their first step.
        config4 = input_json(os.path.join(d, "input4.json"), [a], steps=4, sel=(2, 4))
        later = ("dpk-train: warning: descriptor.sel [2, 4] is too small for these data: the frames checked at start "
                 "(10 batches of each system) have up to [%d, %d] neighbours of each type within rcut 4 A (" % tuple(need))
        for how, start_from in (("--restart", os.path.join(out, "model.ckpt")),
                                ("--init-model", os.path.join(out, "model.dpk"))):
            out2 = os.path.join(d, "out" + how.replace("-", "_"))
            rc2, text2, _ = run([dpk_train, "train", config4, "--output", out2, how, start_from])
            first = 2 if how == "--restart" else 0
            ok = check(name, rc2 == 0, "%s: exit status %d" % (how, rc2), text2) and ok
            lines = [line for line in text2.splitlines() if line.startswith(later)]
            ok = check(name, len(lines) == 1 and lines[0].endswith("use sel >= [%d, %d] (dpk-train neighbor-stat counts "
                                                                    "over all frames)" % tuple(need)),
                       "%s: no line '%s... use sel >= [%d, %d] ...'" % ((how, later) + tuple(need)), text2) and ok
            ok = check(name, lines and 0 <= text2.find(lines[0]) < text2.find("dpk-train: step %d/" % (first + 1)),
                       "%s: the warning is not printed before training" % how, text2) and ok
        report(name, ok, s, (found[0] if found else "") + "; the same from --restart and --init-model")

    @case
    def numb_steps_0(name):
        # Refused before anything is written (DeePMD-kit's exp schedule divides by numb_steps:
        # PyTorch backend ZeroDivisionError); a run that only writes the initial model is
        # --stop-at 0 (next case).
        d = case_dir(name)
        a = random_system(os.path.join(d, "sys"), ["O", "H"], [0, 1, 1], 2, 5.0, 10)
        out, rc, text, s = train(d, input_json(os.path.join(d, "input.json"), [a], steps=0))
        message = "dpk-train: error: training.numb_steps: expected a positive integer, got 0"
        ok = check(name, rc == 1 and message in text, "status %d, expected 1 and '%s'" % (rc, message), text)
        ok = check(name, not os.path.exists(out), "the output folder was created") and ok
        report(name, ok, s, message)

    @case
    def stop_at_0(name):
        d = case_dir(name)
        a = random_system(os.path.join(d, "sys"), ["O", "H"], [0, 1, 1], 2, 5.0, 10)
        out, rc, text, s = train(d, input_json(os.path.join(d, "input.json"), [a], steps=10), "--stop-at", "0")
        ok = trained(name, out, rc, text, 0)
        try:
            header = dpk_files.check_model_file(os.path.join(out, "model.ckpt-0"))
            ok = check(name, header["step"] == 0, "model.ckpt-0 has step %s" % header["step"]) and ok
        except Exception as e:  # noqa: BLE001
            ok = check(name, False, "model.ckpt-0: %s" % e) and ok
        report(name, ok, s, "--stop-at 0: lcurve line of step 0, model.dpk and model.ckpt-0 of the initial model")

    @case
    def batch_larger_than_system(name):
        d = case_dir(name)
        a = random_system(os.path.join(d, "two"), ["O", "H"], [0, 1, 1], 2, 5.0, 11)
        out, rc, text, s = train(d, input_json(os.path.join(d, "input.json"), [a], steps=3, batch_size=5))
        ok = trained(name, out, rc, text, 3)
        # The summary row: 3 atoms, batch size 5 as given, 1 batch (max(1, 2 // 5)).
        row = re.search(r"dpk-train: +3 +5 +1 +1\.000e\+00  T  %s\n" % re.escape(a), text)
        ok = check(name, row is not None, "no summary row '3 5 1'", text) and ok
        report(name, ok, s, "batch_size 5 on a 2-frame system: batches of its 2 frames, 1 batch per epoch")

    for name, fn in cases.items():
        if not only or name in only:
            fn(name)
    print("odd_data: %d case(s) failed; %.1f s" % (len(FAILURES), time.monotonic() - t0), flush=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())

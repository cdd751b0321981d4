#!/usr/bin/env python3
"""Runs a LAMMPS command and checks its thermo output (a ctest helper; standard library only).

  check_thermo.py run     --log LOG [--min-rows N]                   -- COMMAND...
  check_thermo.py compare --log LOG --reference REF [--rtol 1e-9]    -- COMMAND...
  check_thermo.py drift   --log LOG --max-drift X --max-deviation Y  -- COMMAND...

Each mode runs COMMAND (which must exit with status 0 and write LOG, e.g. with `-log LOG`),
then reads the thermo table(s) of LOG (the lines after a header starting with 'Step' up to
'Loop time'):
- run: at least N rows, every value finite;
- compare: the same columns and steps as REF, every value within rtol (relative to the
  largest magnitude of its column, so values passing through zero are fine);
- drift: needs TotEng and Time (ps) and the atom count; prints and bounds the largest deviation
  of the total energy from its first value and the least-squares slope, both per atom
  (eV/atom and eV/atom/ps).
Prints what it compared; exit status 1 on any failure."""
import argparse
import math
import subprocess
import sys


def read_thermo(path):
    header, rows, atoms = None, [], None
    with open(path) as f:
        lines = f.read().splitlines()
    reading = False
    for line in lines:
        words = line.split()
        if not words:
            continue
        if words[0] == "Step":
            header, reading = words, True
            continue
        if words[0] == "Loop" and words[1] == "time":
            reading = False
            if "atoms" in words:
                atoms = int(words[words.index("atoms") - 1])
            continue
        if reading:
            try:
                values = [float(w) for w in words]
            except ValueError:
                continue
            if len(values) == len(header):
                rows.append(values)
    if header is None or not rows:
        sys.exit(f"check_thermo: no thermo table in {path}")
    return header, rows, atoms


def run(command):
    print("check_thermo: running", " ".join(command), flush=True)
    status = subprocess.call(command)
    if status != 0:
        sys.exit(f"check_thermo: the command exited with status {status}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["run", "compare", "drift"])
    p.add_argument("--log", required=True)
    p.add_argument("--reference")
    p.add_argument("--rtol", type=float, default=1e-9)
    p.add_argument("--min-rows", type=int, default=2)
    p.add_argument("--max-drift", type=float)
    p.add_argument("--max-deviation", type=float)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    a = p.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        sys.exit("check_thermo: no command after --")
    run(command)
    header, rows, atoms = read_thermo(a.log)
    for row in rows:
        if not all(math.isfinite(v) for v in row):
            sys.exit(f"check_thermo: non-finite value in row {row}")
    print(f"check_thermo: {len(rows)} thermo rows of {' '.join(header)}")
    if a.mode == "run":
        if len(rows) < a.min_rows:
            sys.exit(f"check_thermo: {len(rows)} rows, expected at least {a.min_rows}")
    elif a.mode == "compare":
        ref_header, ref_rows, _ = read_thermo(a.reference)
        if ref_header != header or len(ref_rows) != len(rows):
            sys.exit(f"check_thermo: {a.log} has {header} x {len(rows)} rows, {a.reference} {ref_header} x {len(ref_rows)}")
        worst, where = 0.0, None
        for c, name in enumerate(header):
            scale = max(abs(r[c]) for r in ref_rows) or 1.0
            for r, s in zip(rows, ref_rows):
                d = abs(r[c] - s[c]) / scale
                if d > worst:
                    worst, where = d, f"{name} at step {s[0]:.0f}: {r[c]!r} vs {s[c]!r}"
        print(f"check_thermo: largest relative difference {worst:.3e} ({where or 'all equal'}), tolerance {a.rtol:g}")
        if worst > a.rtol:
            sys.exit("check_thermo: thermo output differs from the reference")
    else:
        if "TotEng" not in header or "Time" not in header or not atoms:
            sys.exit("check_thermo: drift needs TotEng, Time and the atom count in the log")
        e = [r[header.index("TotEng")] / atoms for r in rows]
        t = [r[header.index("Time")] for r in rows]
        deviation = max(abs(v - e[0]) for v in e)
        tm, em = sum(t) / len(t), sum(e) / len(e)
        slope = sum((ti - tm) * (ei - em) for ti, ei in zip(t, e)) / sum((ti - tm) ** 2 for ti in t)
        print(f"check_thermo: {atoms} atoms, {t[-1] - t[0]:g} ps: largest deviation of the total energy "
              f"{deviation:.3e} eV/atom (bound {a.max_deviation:g}), drift {slope:.3e} eV/atom/ps (bound {a.max_drift:g})")
        if deviation > a.max_deviation or abs(slope) > a.max_drift:
            sys.exit("check_thermo: total energy not conserved within the bounds")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Runs a training command and samples its time at every new line of its learning curve.

    lcurve_sampler.py LCURVE SAMPLES_TSV -- COMMAND [ARGS...]

Starts COMMAND (in the current folder), follows LCURVE (lcurve.out: dpk-train and DeePMD-kit's
TF and PyTorch backends flush every line) and, as each new line with a step number appears,
writes a row `step, wall_s, cpu_s` to SAMPLES_TSV: wall time since the start and the CPU time
(user + system, every thread) of the command's process tree at that moment. The time per step
between two lines of one run then carries none of the start-up, statistics and final model that
a difference of two separate runs must cancel (benchmarks/side_by_side.sh --in-run). Polls every
5 ms; the CPU clock counts in ticks (usually 10 ms), so take lines a few seconds apart.
Exits with the command's status."""
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def stat_fields(pid):
    """Fields of /proc/PID/stat after the command name (field 3 onwards), or None once gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def children(pid):
    """Direct children of every thread of PID."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def tree_cpu(root):
    """CPU seconds of `root` and its live descendants, with the children they have waited for."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        f = stat_fields(pid)
        if f is None:
            continue
        total += sum(int(x) for x in f[11:15])  # utime, stime, cutime, cstime (fields 14-17)
        todo += children(pid)
    return total / TICK


def main():
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit(__doc__)
    lcurve, samples, command = sys.argv[1], sys.argv[2], sys.argv[4:]
    if os.path.exists(lcurve):
        os.remove(lcurve)  # a previous run's lines would be read as this run's
    start = time.monotonic()
    proc = subprocess.Popen(command)
    offset, pending = 0, ""
    with open(samples, "w") as out:
        out.write("step\twall_s\tcpu_s\n")
        while True:
            running = proc.poll() is None
            try:
                size = os.path.getsize(lcurve)
            except FileNotFoundError:
                size = offset
            if size > offset:
                cpu, wall = tree_cpu(proc.pid), time.monotonic() - start
                with open(lcurve) as f:
                    f.seek(offset)
                    text = f.read()
                offset += len(text.encode())
                pending += text
                *lines, pending = pending.split("\n")
                for line in lines:
                    words = line.split()
                    if not words or words[0].startswith("#"):
                        continue
                    try:
                        step = int(float(words[0]))
                    except ValueError:
                        continue
                    if running:  # a line found after the exit has no sample of the live process
                        out.write(f"{step}\t{wall:.4f}\t{cpu:.2f}\n")
                out.flush()
            if not running:
                break
            time.sleep(0.005)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

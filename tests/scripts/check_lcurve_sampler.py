#!/usr/bin/env python3
"""Test of benchmarks/lcurve_sampler.py against a fake trainer whose CPU time is known: it writes a
header and four lcurve lines (steps 0, 10, 20, 30) and spends 0.3 s of CPU before each line after
the first, the third time in a child process (the sampler counts the process tree), then exits
with status 3. Checks the rows (steps in order, header skipped), the CPU between lines against the
0.3 s spent (within a clock tick and scheduling noise), wall >= CPU for this one-thread command,
and that the sampler passes the command's exit status on.

    check_lcurve_sampler.py SAMPLER WORK_DIR"""
import os
import subprocess
import sys

FAKE = r'''
import subprocess, sys, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
with open("lcurve.out", "w") as f:
    f.write("#  step  rmse_val  rmse_trn\n")
    f.flush()
    for k, step in enumerate((0, 10, 20, 30)):
        if k == 2:  # this stretch's CPU in a child process
            subprocess.run([sys.executable, "-c", "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"], check=True)
        elif k > 0:
            burn(0.3)
        f.write(f"{step:7d}  1.0e-01  2.0e-01\n")
        f.flush()
        time.sleep(0.2)  # the sampler sees each line while the process runs
sys.exit(3)
'''


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sampler, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "fake_trainer.py"), "w") as f:
        f.write(FAKE)
    rc = subprocess.run([sys.executable, sampler, "lcurve.out", "samples.tsv", "--", sys.executable, "fake_trainer.py"],
                        cwd=work).returncode
    failures = []
    if rc != 3:
        failures.append(f"exit status {rc}, expected the command's 3")
    with open(os.path.join(work, "samples.tsv")) as f:
        header, *rows = [line.split() for line in f.read().splitlines()]
    if header != ["step", "wall_s", "cpu_s"]:
        failures.append(f"header {header}")
    steps = [int(r[0]) for r in rows]
    if steps != [0, 10, 20, 30]:
        failures.append(f"steps {steps}, expected [0, 10, 20, 30]")
    else:
        wall = [float(r[1]) for r in rows]
        cpu = [float(r[2]) for r in rows]
        tick = 1.0 / os.sysconf("SC_CLK_TCK")
        for k in range(1, 4):
            d_cpu, d_wall = cpu[k] - cpu[k - 1], wall[k] - wall[k - 1]
            print(f"lines {steps[k - 1]} -> {steps[k]}: CPU {d_cpu:.3f} s, wall {d_wall:.3f} s (0.3 s of CPU spent)")
            if not 0.3 - 2 * tick <= d_cpu <= 0.3 + 0.1:
                failures.append(f"CPU between steps {steps[k - 1]} and {steps[k]}: {d_cpu:.3f} s, expected 0.3 s")
            if d_wall < d_cpu - 2 * tick:
                failures.append(f"wall {d_wall:.3f} s < CPU {d_cpu:.3f} s between steps {steps[k - 1]} and {steps[k]}")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

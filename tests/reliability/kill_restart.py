#!/usr/bin/env python3
"""Kill `dpk-train train` at random moments, restart it from what is on disk, and check that
the finished run equals an uninterrupted one bit for bit (docs/reliability.md).

  kill_restart.py DPK_TRAIN WATER_DATA WORK_DIR [--kills N] [--seed S] [--steps N]

A tiny model (rcut 4, nets [4, 8] / [8, 8]) on the water box, validation on, a checkpoint
every 3 steps and an lcurve line every step, so that most of the time goes to writing files.
First an uninterrupted reference run. Then the same run is started, SIGKILLed, restarted
(`--restart OUT/model.ckpt` when OUT/checkpoint exists, else from scratch), ... N times, and
finally left to finish. Kill moments come from random.Random(seed), in three kinds:
  start  - a random delay after the process starts (setup, reading a checkpoint, lcurve repair)
  train  - after 0-20 more progress lines (one per step) than the first one (counted, not timed:
           a loaded machine cannot stretch it into more steps than that)
  write  - as soon as a temporary file (`*.tmp*`) appears in OUT (inside a checkpoint write)
After every kill: the process died of SIGKILL (not an exit), the `checkpoint` pointer names a
file that is a complete, intact checkpoint (magic, header, size, end marker, FNV-1a checksum;
its `step` equals the number in its name), every file under a final name (model.ckpt-N,
model.dpk) is complete, and the restart prints `restarting from <that file> at step <step>`.
At the end: the restarted run exits 0, and OUT holds exactly the reference run's files with
the same bytes (model.dpk, lcurve.out, the last two checkpoints, the pointer); no temporary
file is left. Exit status 0 when everything holds, 1 otherwise (with the reason)."""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dpk_files  # noqa: E402


ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_PROC_BIND="false", DPK_THREAD_DEFAULTS="0")


def fail(message):
    print("kill_restart: FAIL: " + message, flush=True)
    sys.exit(1)


class Run:
    """One dpk-train process; its output is collected by a thread."""

    def __init__(self, command):
        self.started = time.monotonic()
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV)
        self.lines = []
        self.first_step_time = None  # when the first progress line came
        self.step_lines = 0  # progress lines seen so far
        self.ended = False  # the output was closed (the process ended)
        self.progress = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace")
            self.lines.append(line)
            if line.startswith("dpk-train: step "):
                if self.first_step_time is None:
                    self.first_step_time = time.monotonic()
                with self.progress:
                    self.step_lines += 1
                    self.progress.notify_all()
        with self.progress:
            self.ended = True
            self.progress.notify_all()

    def wait_for_steps(self, count, timeout=60):
        """Until `count` progress lines were printed or the process ended (or `timeout` s)."""
        with self.progress:
            self.progress.wait_for(lambda: self.step_lines >= count or self.ended, timeout=timeout)

    def wait(self):
        rc = self.proc.wait()
        self.reader.join()
        return rc

    def output(self):
        return "".join(self.lines)


def train_command(dpk_train, input_json, out, restart):
    command = [dpk_train, "train", input_json, "--output", out]
    if restart:
        command += ["--restart", os.path.join(out, "model.ckpt")]
    return command


def check_disk(out):
    """After a kill: the pointer's checkpoint is intact; every final-named file is complete.
    Returns (pointer file or None, its step or 0, temporaries left)."""
    target = dpk_files.pointer_target(out)
    step = 0
    if target is not None:
        if not os.path.isfile(target):
            fail("the pointer names %s, which does not exist" % target)
        header = dpk_files.check_model_file(target)
        if header["kind"] != "checkpoint" or int(header["step"]) != int(target.rsplit("-", 1)[1]):
            fail("%s: kind %s, step %s" % (target, header["kind"], header["step"]))
        step = int(header["step"])
    temporaries = []
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        if ".tmp" in name:
            temporaries.append(name)
        elif name.startswith("model.ckpt-") or name == "model.dpk":
            try:
                dpk_files.check_model_file(path)
            except Exception as e:  # noqa: BLE001
                fail("a file under its final name is not complete: %s" % e)
    return target, step, temporaries


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dpk_train")
    parser.add_argument("water_data")
    parser.add_argument("work_dir")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--steps", type=int, default=180)
    args = parser.parse_args()
    args.water_data = os.path.abspath(args.water_data)
    t0 = time.monotonic()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    input_json = os.path.join(args.work_dir, "input.json")
    dpk_files.write_small_water_input(input_json, args.water_data, ["data_0", "data_1"], args.steps, save_freq=3,
                                      validation="data_3")
    ref = os.path.join(args.work_dir, "reference")
    out = os.path.join(args.work_dir, "killed")

    reference = Run(train_command(args.dpk_train, input_json, ref, False))
    if reference.wait() != 0:
        fail("the reference run failed:\n" + reference.output())
    ref_end = time.monotonic()
    startup = reference.first_step_time - reference.started
    step_seconds = (ref_end - reference.first_step_time) / args.steps
    print("kill_restart: reference run %.2f s (setup %.3f s, %.2f ms/step)" %
          (ref_end - reference.started, startup, step_seconds * 1e3), flush=True)

    rng = random.Random(args.seed)
    kinds = {"start": 0, "train": 0, "write": 0}
    killed_in_write = 0
    restarts_from = []
    dropped_lines = 0
    expected_restart = None  # (file, step) the next run must restart from
    kills = 0
    while True:
        restart = dpk_files.pointer_target(out) is not None if os.path.isdir(out) else False
        run = Run(train_command(args.dpk_train, input_json, out, restart))
        kind = None
        if kills < args.kills:
            kind = rng.choices(["start", "train", "write"], weights=[1, 2, 2])[0]
            if kind == "start":
                delay = rng.uniform(0.0, startup + 5 * step_seconds)
                deadline = run.started + delay
                while time.monotonic() < deadline and run.proc.poll() is None:
                    time.sleep(0.0005)
            elif kind == "train":
                run.wait_for_steps(1 + rng.randint(0, 20))
            else:
                run.wait_for_steps(1)
                skip = rng.randrange(0, 3)  # the first, second or third temporary file seen
                seen = set()
                while run.proc.poll() is None:
                    names = [n for n in os.listdir(out) if ".tmp" in n] if os.path.isdir(out) else []
                    new = [n for n in names if n not in seen]
                    if new:
                        seen.update(new)
                        if skip == 0:
                            break
                        skip -= 1
            if run.proc.poll() is None:
                run.proc.send_signal(signal.SIGKILL)
        rc = run.wait()
        text = run.output()
        if expected_restart is not None:
            # A run killed before it got that far printed nothing about it; any restart line
            # must name the pointer's checkpoint, and a run that finished must have printed it.
            line = "dpk-train: restarting from %s at step %d" % expected_restart
            others = [x for x in text.splitlines() if x.startswith("dpk-train: restarting from") and x != line]
            if others or (rc == 0 and line not in text):
                fail("expected '%s' in the restarted run's output:\n%s" % (line, text))
            if line in text:
                restarts_from.append(expected_restart[1])
        for line in text.splitlines():
            if ": dropped " in line and " line(s) after step " in line:
                dropped_lines += int(line.split(": dropped ")[1].split()[0])
        if rc == 0:
            break
        if rc != -signal.SIGKILL:
            fail("dpk-train exited with status %d (not killed):\n%s" % (rc, text))
        kills += 1
        kinds[kind] += 1
        target, step, temporaries = check_disk(out) if os.path.isdir(out) else (None, 0, [])
        if temporaries:
            killed_in_write += 1
        expected_restart = (target, step) if target is not None else None
        print("kill_restart: kill %2d (%s): pointer %s, temporaries %s" %
              (kills, kind, os.path.basename(target) if target else "none", temporaries or "none"), flush=True)
    if kills < args.kills:
        fail("the run finished after %d kills (expected %d; raise --steps)" % (kills, args.kills))

    # The finished run equals the reference: same files, same bytes, nothing else left.
    ref_files = sorted(os.listdir(ref))
    out_files = sorted(os.listdir(out))
    if ref_files != out_files:
        fail("files differ: reference %s, killed and restarted %s" % (ref_files, out_files))
    for name in ref_files:
        with open(os.path.join(ref, name), "rb") as a, open(os.path.join(out, name), "rb") as b:
            if a.read() != b.read():
                fail("%s differs from the uninterrupted run's" % name)
    dpk_files.check_model_file(os.path.join(out, "model.dpk"))
    with open(os.path.join(out, "lcurve.out")) as f:
        lines = f.read().splitlines()
    steps = [int(line.split()[0]) for line in lines[1:]]
    if not lines[0].startswith("#") or steps != list(range(args.steps + 1)):
        fail("lcurve.out does not hold one line per step 0..%d: %s" % (args.steps, steps))
    print("kill_restart: %d kills (%s), %d left a temporary file (killed inside a write), restarts from steps %s, "
          "%d lcurve line(s) dropped on restart; final files identical to the uninterrupted run: %s; %.1f s" %
          (kills, ", ".join("%s %d" % kv for kv in kinds.items()), killed_in_write, restarts_from, dropped_lines,
           ", ".join(ref_files), time.monotonic() - t0), flush=True)
    print("kill_restart: PASS", flush=True)


if __name__ == "__main__":
    main()

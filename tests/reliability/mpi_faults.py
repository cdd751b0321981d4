#!/usr/bin/env python3
"""One rank of `mpirun -np 2 dpk-train train` fails (docs/reliability.md):

  mpi_faults.py MPIEXEC DPK_TRAIN FAULT_SHIM WATER_DATA WORK_DIR

  rank1_read_eio   rank 1 cannot read data_0/set.000/force.npy (EIO from the LD_PRELOAD shim,
                   on rank 1 only) while rank 0 read it and waits for rank 1 in a collective
  rank0_disk_full  rank 0 (the writer) gets ENOSPC writing model.ckpt-10 while rank 1 waits
  rank1_killed     rank 1 is SIGKILLed at step 20 (found by its environment in /proc)

Each: mpirun exits with a non-zero status within 60 s (no hang; a run still going then is
killed and the case fails), the output names the failing rank (dpk-train's `error on rank R
of 2: ...` with the file and the OS reason, or Open MPI's `process rank 1 ... exited on signal
9`), no other rank reports an error of its own, and the output folder holds what it should: no
checkpoint before the first save, else a `checkpoint` pointer naming an intact checkpoint of the
expected step. rank1_killed then restarts on 2 ranks from that checkpoint and must end with the
files of an uninterrupted 2-rank run, byte for byte. Exit status 0 when every case holds."""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dpk_files  # noqa: E402


TIMEOUT = 60
TAG = "DPK_MPI_FAULT_TAG=%d" % os.getpid()
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_PROC_BIND="false", DPK_THREAD_DEFAULTS="0",
           OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
ENV["DPK_MPI_FAULT_TAG"] = TAG.split("=")[1]
FAILURES = []


def check(case, condition, what, output=""):
    if not condition:
        FAILURES.append(case)
        print("mpi_faults: %s: FAIL: %s%s" % (case, what, "\n" + output if output else ""), flush=True)
    return condition


def rank_pid(rank):
    """The pid of this test's dpk-train process of MPI rank `rank`, or None."""
    want = [TAG.encode(), ("OMPI_COMM_WORLD_RANK=%d" % rank).encode()]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/comm" % entry) as f:
                if f.read().strip() != "dpk-train":
                    continue
            with open("/proc/%s/environ" % entry, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if all(w in env for w in want):
            return int(entry)
    return None


def mpirun(mpiexec, args, env, kill_rank_at=None):
    """Runs `mpiexec -np 2 args`; returns (status, output, seconds, killed pid). With
    kill_rank_at=(rank, line prefix): SIGKILL that rank once a line starts with the prefix."""
    start = time.monotonic()
    proc = subprocess.Popen([mpiexec, "-np", "2"] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    lines = []
    killed = []

    def read():
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            lines.append(line)
            if kill_rank_at and not killed and line.startswith(kill_rank_at[1]):
                pid = rank_pid(kill_rank_at[0])
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        rc = "hang (killed after %d s)" % TIMEOUT
    reader.join(timeout=5)
    return rc, "".join(lines), time.monotonic() - start, killed[0] if killed else None


def check_folder(case, out, pointer_step):
    ok = True
    files = sorted(os.listdir(out)) if os.path.isdir(out) else []
    for f in files:
        if (f.startswith("model.ckpt-") or f == "model.dpk") and ".tmp" not in f:
            try:
                dpk_files.check_model_file(os.path.join(out, f))
            except Exception as e:  # noqa: BLE001
                ok = check(case, False, "a file under its final name is not complete: %s" % e) and ok
    target = dpk_files.pointer_target(out) if os.path.isdir(out) else None
    if pointer_step is None:
        return check(case, target is None, "a checkpoint pointer exists: %s" % target) and ok
    ok = check(case, target == os.path.join(out, "model.ckpt-%d" % pointer_step),
               "the pointer names %s, expected model.ckpt-%d" % (target, pointer_step)) and ok
    if ok:
        header = dpk_files.check_model_file(target)
        ok = check(case, header["kind"] == "checkpoint" and int(header["step"]) == pointer_step and
                   len(header["sampler_states"]) == 2, "%s: not a 2-rank checkpoint of step %d" % (target, pointer_step))
    return ok


def main():
    mpiexec = sys.argv[1]
    dpk_train, shim, data, work = (os.path.abspath(a) for a in sys.argv[2:6])
    preload = dpk_files.preload(shim, dpk_train)
    t0 = time.monotonic()
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    input_json = os.path.join(work, "input.json")
    dpk_files.write_small_water_input(input_json, data, ["data_0", "data_1"], 60, save_freq=5, decay_steps=20)

    def train(out, *extra):
        return [dpk_train, "train", input_json, "--output", out] + list(extra)

    # rank1_read_eio
    case, out = "rank1_read_eio", os.path.join(work, "rank1_read_eio")
    force = os.path.join(data, "data_0", "set.000", "force.npy")
    env = dict(ENV, LD_PRELOAD=preload, DPK_FAULT_OP="read", DPK_FAULT_ERRNO="EIO", DPK_FAULT_RANK="1",
               DPK_FAULT_PATH="data_0/set.000/force.npy")
    rc, text, seconds, _ = mpirun(mpiexec, train(out), env)
    message = "dpk-train: error on rank 1 of 2: npy file '%s': read failed after 0 bytes (Input/output error)" % force
    ok = check(case, isinstance(rc, int) and rc != 0, "mpirun status %s, expected non-zero" % rc, text)
    ok = check(case, message in text and "dpk-train: rank 1 stops every rank (MPI_Abort)" in text,
               "no '%s'" % message, text) and ok
    ok = check(case, "error on rank 0" not in text, "rank 0 reported an error too", text) and ok
    ok = check_folder(case, out, None) and ok
    if ok:
        print("mpi_faults: %s: ok, mpirun status %d after %.1f s: %s" % (case, rc, seconds, message), flush=True)

    # rank0_disk_full
    case, out = "rank0_disk_full", os.path.join(work, "rank0_disk_full")
    env = dict(ENV, LD_PRELOAD=preload, DPK_FAULT_PATH="model.ckpt-10", DPK_FAULT_BYTES="4096", DPK_FAULT_RANK="0")
    rc, text, seconds, _ = mpirun(mpiexec, train(out), env)
    expect = (r"dpk-train: error on rank 0 of 2: model file '%s/model\.ckpt-10': write failed after 4096 of [0-9]+ "
              r"bytes \(No space left on device\) on the temporary file; '%s/model\.ckpt-10' is unchanged, the "
              r"temporary file '%s/model\.ckpt-10\.tmp\.[0-9]+' was removed" % ((re.escape(out),) * 3))
    found = re.search(expect, text)
    ok = check(case, isinstance(rc, int) and rc != 0, "mpirun status %s, expected non-zero" % rc, text)
    ok = check(case, found is not None, "no line matching '%s'" % expect, text) and ok
    ok = check(case, "error on rank 1" not in text, "rank 1 reported an error too", text) and ok
    ok = check_folder(case, out, 5) and ok
    if ok:
        print("mpi_faults: %s: ok, mpirun status %d after %.1f s: %s" % (case, rc, seconds, found.group(0)),
              flush=True)

    # rank1_killed, against an uninterrupted 2-rank run
    case, out, ref = "rank1_killed", os.path.join(work, "rank1_killed"), os.path.join(work, "reference_np2")
    rc, text, seconds, _ = mpirun(mpiexec, train(ref), ENV)
    if check(case, rc == 0, "the uninterrupted 2-rank run failed (status %s)" % rc, text):
        rc, text, seconds, pid = mpirun(mpiexec, train(out), ENV, kill_rank_at=(1, "dpk-train: step 20/"))
        ok = check(case, pid is not None, "rank 1's process was not found", text)
        ok = check(case, isinstance(rc, int) and rc != 0, "mpirun status %s, expected non-zero" % rc, text) and ok
        # Open MPI 4 prints "PID 0" here, not the pid.
        noticed = re.search(r"process rank 1 with PID [0-9]+ .*exited on signal 9", text)
        ok = check(case, noticed is not None, "no 'process rank 1 with PID ... exited on signal 9'", text) and ok
        ok = check(case, "dpk-train: error on rank" not in text, "a rank reported an error", text) and ok
        target = dpk_files.pointer_target(out)
        step = int(target.rsplit("-", 1)[1]) if target else -1
        ok = check(case, step >= 20, "the pointer names %s, expected model.ckpt-20 or later" % target) and ok
        ok = ok and check_folder(case, out, step)
        if ok:
            first = noticed.group(0)
            rc, text, _, _ = mpirun(mpiexec, train(out, "--restart", os.path.join(out, "model.ckpt")), ENV)
            line = "dpk-train: restarting from %s at step %d" % (target, step)
            ok = check(case, rc == 0 and line in text, "the 2-rank restart failed (status %s)" % rc, text)
            a, b = sorted(os.listdir(ref)), sorted(os.listdir(out))
            ok = ok and check(case, a == b, "files differ after the restart: %s vs %s" % (a, b))
            for name in a if ok else []:
                with open(os.path.join(ref, name), "rb") as x, open(os.path.join(out, name), "rb") as y:
                    ok = check(case, x.read() == y.read(), "%s differs from the uninterrupted run's" % name) and ok
            if ok:
                print("mpi_faults: %s: ok, mpirun stopped %.1f s after the start: %s; restarted from step %d, "
                      "files identical to the uninterrupted 2-rank run" % (case, seconds, first, step), flush=True)

    print("mpi_faults: %d case(s) failed; %.1f s" % (len(FAILURES), time.monotonic() - t0), flush=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())

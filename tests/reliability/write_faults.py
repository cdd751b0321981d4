#!/usr/bin/env python3
"""Write failures of `dpk-train train` (docs/reliability.md): a full disk (ENOSPC), a failing
device (EIO on fsync), a refused rename, a file-size limit (RLIMIT_FSIZE: EFBIG from the
kernel), an output folder that cannot be created. The faults come from the LD_PRELOAD shim
tests/reliability/fault_shim.cpp (write/fsync/rename of one file fail) or from the kernel.

  write_faults.py DPK_TRAIN FAULT_SHIM WATER_DATA WORK_DIR

For each case: dpk-train exits with status 1 and prints `dpk-train: error: ` and the expected
message (naming the file, the failed step and the OS reason); the output folder holds no
temporary file and no partial file under a final name; the `checkpoint` pointer names an
intact checkpoint of the expected step (or there is none, as expected). Where the case says so,
a restart from that checkpoint without the fault finishes with the files of an uninterrupted
run, byte for byte. Exit status 0 when every case holds."""
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dpk_files  # noqa: E402


ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_PROC_BIND="false", DPK_THREAD_DEFAULTS="0")
FAILURES = []


def run(command, env=None):
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env or ENV)
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def check(case, condition, what, output=""):
    if not condition:
        FAILURES.append(case)
        print("write_faults: %s: FAIL: %s%s" % (case, what, "\n" + output if output else ""), flush=True)
    return condition


def same_files(case, ref, out):
    a, b = sorted(os.listdir(ref)), sorted(os.listdir(out))
    if not check(case, a == b, "files differ after the restart: %s vs %s" % (a, b)):
        return False
    for name in a:
        with open(os.path.join(ref, name), "rb") as x, open(os.path.join(out, name), "rb") as y:
            if not check(case, x.read() == y.read(), "%s differs from the uninterrupted run's" % name):
                return False
    return True


def run_with_fsize_limit(command, limit):
    """Runs `command` with SIGXFSZ ignored (write() then fails with EFBIG) and, once it has
    printed its first line (after MPI_Init: Open MPI's PMIx cannot create its shared-memory
    files under a small limit), RLIMIT_FSIZE = `limit` set from outside with prlimit."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV,
                            preexec_fn=lambda: signal.signal(signal.SIGXFSZ, signal.SIG_IGN))
    first = proc.stdout.readline()
    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (limit, limit))
    rest = proc.stdout.read()
    return proc.wait(), (first + rest).decode("utf-8", "replace")


def main():
    dpk_train, shim, data, work = (os.path.abspath(a) for a in sys.argv[1:5])
    preload = dpk_files.preload(shim, dpk_train)
    t0 = time.monotonic()
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    input_json = os.path.join(work, "input.json")
    dpk_files.write_small_water_input(input_json, data, ["data_0"], 12, save_freq=3)
    ref = os.path.join(work, "reference")
    rc, text = run([dpk_train, "train", input_json, "--output", ref])
    if rc != 0:
        print("write_faults: the reference run failed:\n" + text)
        return 1
    model_bytes = os.path.getsize(os.path.join(ref, "model.dpk"))
    pid = r"\.tmp\.[0-9]+"
    with open(os.path.join(ref, "lcurve.out"), "rb") as f:
        lcurve = f.read().splitlines(keepends=True)
    lcurve_budget = sum(len(line) for line in lcurve[:9])  # header and steps 0-7: step 8's line fails

    # name, fault environment (or preexec), expected message (regex; OUT is the output folder),
    # expected pointer step (None: no pointer), restart afterwards?
    cases = [
        ("checkpoint_enospc", {"DPK_FAULT_PATH": "model.ckpt-6", "DPK_FAULT_BYTES": "4096"},
         r"model file 'OUT/model\.ckpt-6': write failed after 4096 of [0-9]+ bytes \(No space left on device\) on the "
         r"temporary file; 'OUT/model\.ckpt-6' is unchanged, the temporary file 'OUT/model\.ckpt-6%s' was removed"
         % pid, 3, True),
        ("checkpoint_fsync_eio", {"DPK_FAULT_PATH": "model.ckpt-9", "DPK_FAULT_OP": "fsync", "DPK_FAULT_ERRNO": "EIO"},
         r"model file 'OUT/model\.ckpt-9': fsync failed \(Input/output error\) on the temporary file; "
         r"'OUT/model\.ckpt-9' is unchanged, the temporary file 'OUT/model\.ckpt-9%s' was removed" % pid, 6, True),
        ("checkpoint_rename", {"DPK_FAULT_PATH": "model.ckpt-3", "DPK_FAULT_OP": "rename", "DPK_FAULT_ERRNO": "EACCES"},
         r"model file 'OUT/model\.ckpt-3': cannot rename the temporary file into place \(Permission denied\); "
         r"'OUT/model\.ckpt-3' is unchanged, the temporary file 'OUT/model\.ckpt-3%s' was removed" % pid, None, False),
        ("pointer_enospc", {"DPK_FAULT_PATH": "checkpoint", "DPK_FAULT_BYTES": "13"},
         r"checkpoint pointer 'OUT/checkpoint': write failed after 0 of 13 bytes \(No space left on device\) on the "
         r"temporary file; 'OUT/checkpoint' is unchanged, the temporary file 'OUT/checkpoint%s' was removed" % pid,
         3, True),
        ("model_enospc", {"DPK_FAULT_PATH": "model.dpk", "DPK_FAULT_BYTES": "1000"},
         r"model file 'OUT/model\.dpk': write failed after 1000 of %d bytes \(No space left on device\) on the "
         r"temporary file; 'OUT/model\.dpk' is unchanged, the temporary file 'OUT/model\.dpk%s' was removed"
         % (model_bytes, pid), 12, True),
        ("lcurve_enospc", {"DPK_FAULT_PATH": "lcurve.out", "DPK_FAULT_BYTES": str(lcurve_budget)},
         r"lcurve: write to 'OUT/lcurve\.out' failed \(No space left on device\)", 6, True),
        # The first checkpoint after the limit is set fails (model.ckpt-3 unless setup was very
        # fast); the pointer then names the one before it (none for model.ckpt-3).
        ("checkpoint_efbig_rlimit", 20000,
         r"model file 'OUT/model\.ckpt-([0-9]+)': write failed after 20000 of [0-9]+ bytes \(File too large\) on the "
         r"temporary file; 'OUT/model\.ckpt-\1' is unchanged, the temporary file 'OUT/model\.ckpt-\1%s' was removed"
         % pid, "from-message", True),
    ]
    for name, fault, expect, pointer_step, restart in cases:
        out = os.path.join(work, name)
        command = [dpk_train, "train", input_json, "--output", out]
        if isinstance(fault, int):
            rc, text = run_with_fsize_limit(command, fault)
        else:
            rc, text = run(command, env=dict(ENV, LD_PRELOAD=preload, **fault))
        message = "dpk-train: error: " + expect.replace("OUT", re.escape(out))
        ok = check(name, rc == 1, "exit status %d, expected 1" % rc, text)
        found = re.search(message, text)
        ok = check(name, found is not None, "no line matching '%s'" % message, text) and ok
        if pointer_step == "from-message":
            pointer_step = int(found.group(1)) - 3 if found else -1
            if pointer_step == 0:
                pointer_step, restart = None, False
        files = sorted(os.listdir(out))
        ok = check(name, not [f for f in files if ".tmp" in f], "temporary files left: %s" % files) and ok
        for f in files:
            if f.startswith("model.ckpt-") or f == "model.dpk":
                try:
                    dpk_files.check_model_file(os.path.join(out, f))
                except Exception as e:  # noqa: BLE001
                    ok = check(name, False, "a file under its final name is not complete: %s" % e)
        target = dpk_files.pointer_target(out)
        if pointer_step is None:
            ok = check(name, target is None, "a checkpoint pointer exists: %s" % target) and ok
        else:
            good = target == os.path.join(out, "model.ckpt-%d" % pointer_step)
            ok = check(name, good, "the pointer names %s, expected model.ckpt-%d" % (target, pointer_step)) and ok
            if good:
                header = dpk_files.check_model_file(target)
                ok = check(name, header["kind"] == "checkpoint" and int(header["step"]) == pointer_step,
                           "%s: kind %s step %s" % (target, header["kind"], header["step"])) and ok
        if ok and restart:
            rc, text = run([dpk_train, "train", input_json, "--output", out, "--restart",
                            os.path.join(out, "model.ckpt")])
            line = "dpk-train: restarting from %s at step %d" % (target, pointer_step)
            ok = check(name, rc == 0 and line in text, "the restart failed (status %d)" % rc, text)
            ok = ok and same_files(name, ref, out)
        if ok:
            print("write_faults: %s: ok%s: %s" % (name, ", restart equals the uninterrupted run" if restart else "",
                                                 found.group(0)), flush=True)

    # An output folder that cannot be created (its parent is a regular file).
    blocker = os.path.join(work, "a_file")
    with open(blocker, "w") as f:
        f.write("not a folder\n")
    out = os.path.join(blocker, "out")
    rc, text = run([dpk_train, "train", input_json, "--output", out])
    message = "dpk-train: error: --output '%s': cannot create the output folder (Not a directory)" % out
    if check("output_parent_is_a_file", rc == 1 and message in text, "status %d, expected 1 and '%s'" % (rc, message),
             text):
        print("write_faults: output_parent_is_a_file: ok", flush=True)

    print("write_faults: %d case(s) failed; %.1f s" % (len(FAILURES), time.monotonic() - t0), flush=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Checks scripts/gpu_bundle_run.sh (the GPU bundle's run.sh) with this CPU build: a bundle folder
# holding this build's dpk-train and kernel-times tool and three stand-in test programs (one
# passes, one fails with status 3, one outlasts the time limit). Asserts run.sh's verdict for
# each step, its exit status, its failure count and the files it writes; then that it exits 0
# when every test passes.
#   check_gpu_bundle_run.sh SOURCE_DIR DPK_TRAIN KERNEL_TIMES_LIBRARY WORK_DIR
set -u
[ $# -eq 4 ] || { echo "usage: $0 SOURCE_DIR DPK_TRAIN KERNEL_TIMES_LIBRARY WORK_DIR" >&2; exit 2; }
src=$(realpath "$1") train=$(realpath "$2") tool=$(realpath "$3") work=$4
fail() { echo "check_gpu_bundle_run: $*" >&2; exit 1; }

rm -rf "$work" && mkdir -p "$work/bin" "$work/lib" "$work/tests" "$work/examples" || exit 1
cp "$src/scripts/gpu_bundle_run.sh" "$work/run.sh"
ln -s "$train" "$work/bin/dpk-train"
cp "$tool" "$work/lib/libdpk-kernel-times.so"
ln -s "$src/examples/water" "$work/examples/water"
ln -s "$src/tests/data" "$work/tests/data"
printf '#!/bin/sh\necho "[doctest] test cases: 1 | 1 passed | 0 failed | 0 skipped"\n' >"$work/bin/test_pass"
printf '#!/bin/sh\necho "stand-in failure"\nexit 3\n' >"$work/bin/test_fail"
printf '#!/bin/sh\nexec sleep 60\n' >"$work/bin/test_slow"
chmod 755 "$work/bin/test_pass" "$work/bin/test_fail" "$work/bin/test_slow"

export OMP_NUM_THREADS=1 OMP_PROC_BIND=false
out=$(cd "$work" && DPK_JOBS=3 DPK_TEST_TIMEOUT=3 DPK_PARTS="tests train kernels" DPK_KERNEL_STEPS=2 ./run.sh 0 2 2>&1)
rc=$?
echo "$out"
[ "$rc" -ne 0 ] || fail "run.sh exited 0 although two tests did not pass"
for want in "PASS  test_pass" "FAIL rc=3  test_fail" "stand-in failure" "TIMEOUT  test_slow" \
    "PASS  dpk-train train float64" "PASS  dpk-train train float32" "PASS  dpk-train test (float64 model)" \
    "PASS  dpk-train train with kernel times" "== 2 failure(s)"; do
  grep -qF -- "$want" <<<"$out" || fail "run.sh's output lacks '$want'"
done
grep -q 'dpk::neighbor::' "$work/results/kernel-times-float64.txt" 2>/dev/null \
  || fail "no dpk kernel in results/kernel-times-float64.txt"
for f in train-float64/lcurve.out train-float32/lcurve.out train-float64/model.dpk test.log; do
  [ -s "$work/results/$f" ] || fail "results/$f missing"
done

rm "$work/bin/test_fail" "$work/bin/test_slow"
(cd "$work" && DPK_PARTS=tests ./run.sh >/dev/null 2>&1) || fail "run.sh exited non-zero although every test passed"

# A cuBLAS bundle (its MANIFEST names libcublas.so.13) puts DPK_CUBLAS_DIR first on the library path.
echo "  test_pass: libcuda.so.1 libcublas.so.13 libc.so.6" >"$work/MANIFEST.txt"
mkdir -p "$work/cublas"
printf '#!/bin/sh
echo "library path: $LD_LIBRARY_PATH"
' >"$work/bin/test_pass"
out=$(cd "$work" && DPK_CUBLAS_DIR="$work/cublas" DPK_PARTS=tests ./run.sh 2>&1) || fail "run.sh failed with DPK_CUBLAS_DIR"
grep -qF "== cuBLAS 13 from $work/cublas" <<<"$out" || fail "run.sh did not report DPK_CUBLAS_DIR"
grep -qF "library path: $work/cublas:" "$work/results/test_pass.log" || fail "DPK_CUBLAS_DIR is not first on LD_LIBRARY_PATH"
echo "check_gpu_bundle_run: ok"

#!/usr/bin/env bash
# dpk GPU bundle's run.sh (scripts/gpu_bundle.sh copies this file into the bundle). On the GPU it
# runs, in this order:
#   1. every test binary (bin/test_*), DPK_JOBS at a time (they share the GPU), each under a timeout;
#   2. a short training of the water example in float64 and float32 (examples/water/se_e2_a's
#      input.json and input_float32.json, unchanged, stopped early with --stop-at), and
#      `dpk-train test` of the float64 model on data_3;
#   3. the float64 training again under the kernel-times tool (lib/libdpk-kernel-times.so: Kokkos 4
#      fences every kernel for a tool, so each kernel's time is its GPU time);
#   4. the benchmarks (bin/bench_*), if the bundle has them.
# Prints PASS / FAIL / TIMEOUT per step; logs, learning curves and benchmark tables in results/.
#
#   ./run.sh [device id, default 0] [training steps, default 300]
#   DPK_JOBS=N            test binaries at a time (default 4)
#   DPK_TEST_TIMEOUT=S    seconds per test binary (default 600)
#   DPK_TRAIN_TIMEOUT=S   seconds per training or `dpk-train test` (default 600)
#   DPK_PARTS="..."       which of the parts: tests train kernels bench (default all four)
#   DPK_BENCH_PROGRAMS    which benchmark programs (default every bin/bench_*), e.g. "bench_model"
#   DPK_BENCH_MIN_TIME    seconds per benchmark case (default 0.2)
#   DPK_BENCH_TIMEOUT=S   seconds per benchmark program (default 300)
#   DPK_KERNEL_STEPS=N    training steps under the kernel-times tool (default 100)
# Needs only an NVIDIA driver and glibc (MANIFEST.txt says which version).
set -u
cd "$(dirname "$0")" || exit 1
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-${1:-0}}"
steps="${2:-300}"
jobs="${DPK_JOBS:-4}"
parts=" ${DPK_PARTS:-tests train kernels bench} "
want() { case "$parts" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
export CUDA_CACHE_PATH="${CUDA_CACHE_PATH:-$PWD/.nv-cache}"   # PTX JIT cache (GPUs newer than the bundle's)
export CUDA_CACHE_MAXSIZE="${CUDA_CACHE_MAXSIZE:-4294967296}"
export LD_LIBRARY_PATH="$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A bundle linked to cuBLAS 13 (gpu_bundle.sh's hopper90-cublas) takes it from the host:
# DPK_CUBLAS_DIR, else PyTorch's nvidia/cu13/lib, else /usr/local/cuda/lib64.
if grep -q 'libcublas\.so\.13' MANIFEST.txt 2>/dev/null; then
  cublas_dir="${DPK_CUBLAS_DIR:-}"
  [ -n "$cublas_dir" ] || cublas_dir=$(python3 -c 'import os, nvidia
print(next((d for d in (os.path.join(p, "cu13", "lib") for p in nvidia.__path__) if os.path.isfile(os.path.join(d, "libcublas.so.13"))), ""))' 2>/dev/null || true)
  [ -n "$cublas_dir" ] || { [ -f /usr/local/cuda/lib64/libcublas.so.13 ] && cublas_dir=/usr/local/cuda/lib64; }
  if [ -n "$cublas_dir" ]; then
    export LD_LIBRARY_PATH="$cublas_dir:$LD_LIBRARY_PATH"
    echo "== cuBLAS 13 from $cublas_dir"
  else
    echo "== this bundle needs libcublas.so.13 and none was found: set DPK_CUBLAS_DIR"
  fi
fi
mkdir -p results
fail=0
t0=$(date +%s)

# Runs "$@" for at most $limit seconds, output to $log; sets $status (PASS, FAIL rc=N, TIMEOUT)
# and $secs.
timed() {
  local log=$1 start rc
  shift
  start=$(date +%s)
  timeout "$limit" "$@" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  case $rc in 0) status=PASS ;; 124) status=TIMEOUT ;; *) status="FAIL rc=$rc" ;; esac
}

echo "== dpk GPU bundle: $(cat VERSION 2>/dev/null); CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

run_test() {
  local name
  name=$(basename "$1")
  timed "results/$name.log" "$1"
  echo "$status|$secs" >"results/$name.status"
}

part_tests() {
  limit="${DPK_TEST_TIMEOUT:-600}"
  echo "== 1. tests ($jobs at a time, ${limit} s each)"
  local t name
  for t in bin/test_*; do
    [ -x "$t" ] || continue
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    run_test "$t" &
  done
  wait
  for t in bin/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    IFS='|' read -r status secs <"results/$name.status"
    echo "$status  $name  ($secs s; log results/$name.log)"
    # doctest's summary line, or the end of the log when it failed
    if [ "$status" = PASS ]; then grep -m1 '^\[doctest\] test cases' "results/$name.log"
    else fail=$((fail + 1)); tail -n 30 "results/$name.log"; fi
  done
}

part_train() {
  limit="${DPK_TRAIN_TIMEOUT:-600}"
  echo "== 2. training, water example, $steps steps"
  for precision in float64 float32; do
    input=examples/water/se_e2_a/input.json
    [ "$precision" = float32 ] && input=examples/water/se_e2_a/input_float32.json
    [ -x bin/dpk-train ] || { echo "SKIP  dpk-train (not in this bundle)"; break; }
    timed "results/train-$precision.log" bin/dpk-train train "$input" --output "results/train-$precision" --stop-at "$steps"
    echo "$status  dpk-train train $precision ($secs s; log results/train-$precision.log)"
    [ "$status" = PASS ] || fail=$((fail + 1))
    grep -E 'backend|finished|dropped' "results/train-$precision.log"
    [ "$status" = PASS ] || tail -n 20 "results/train-$precision.log"
    [ -f "results/train-$precision/lcurve.out" ] && { echo "-- lcurve.out (header, first and last line)"
      sed -n '1,2p;$p' "results/train-$precision/lcurve.out" | uniq; }
  done
  if [ -f results/train-float64/model.dpk ]; then
    timed results/test.log bin/dpk-train test -m results/train-float64/model.dpk -s examples/water/data/data_3 -n 20
    echo "$status  dpk-train test (float64 model) on data_3 ($secs s; log results/test.log)"
    [ "$status" = PASS ] || fail=$((fail + 1))
    tail -n 8 results/test.log
  fi
}

part_kernels() {
  local kernel_steps="${DPK_KERNEL_STEPS:-100}"
  limit="${DPK_TRAIN_TIMEOUT:-600}"
  echo "== 3. kernel times, float64 training, $kernel_steps steps"
  if [ -f lib/libdpk-kernel-times.so ] && [ -x bin/dpk-train ]; then
    tool="$PWD/lib/libdpk-kernel-times.so"   # Kokkos 4 reads the first name, Kokkos 3 the second
    KOKKOS_TOOLS_LIBS="$tool" KOKKOS_PROFILE_LIBRARY="$tool" DPK_KERNEL_TIMES="$PWD/results/kernel-times-float64.txt" \
      timed results/train-kernel-times.log bin/dpk-train train examples/water/se_e2_a/input.json \
      --output results/train-kernel-times --stop-at "$kernel_steps"
    echo "$status  dpk-train train with kernel times ($secs s; table results/kernel-times-float64.txt)"
    grep -E 'finished' results/train-kernel-times.log
    head -n 25 results/kernel-times-float64.txt 2>/dev/null
  else
    echo "SKIP  kernel times (no lib/libdpk-kernel-times.so in this bundle)"
  fi
}

part_bench() {
  echo "== 4. benchmarks"
  limit="${DPK_BENCH_TIMEOUT:-300}"
  programs=${DPK_BENCH_PROGRAMS:-$(cd bin && ls bench_* 2>/dev/null)}
  for name in $programs; do
    b="bin/$name"
    [ -x "$b" ] || { echo "SKIP  $name (not in this bundle)"; continue; }
    timed "results/$name.txt" "$b" "--benchmark_min_time=${DPK_BENCH_MIN_TIME:-0.2}"
    echo "$status  $name ($secs s; table results/$name.txt)"
    [ "$status" = PASS ] || fail=$((fail + 1))
    grep -v -E '^(-|Run on|CPU Caches|  L[123]|Load Average|\*\*\*)' "results/$name.txt" | tail -n 40
  done
}

for part in tests train kernels bench; do
  want "$part" && "part_$part"
done

echo "== $fail failure(s) in $(( $(date +%s) - t0 )) s; logs in $PWD/results"
[ "$fail" = 0 ]

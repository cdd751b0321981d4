#!/bin/bash
# Side-by-side benchmark of two dpk builds (e.g. the previous commit in a git worktree and this
# one), alternating so that both see the same machine state:
#   git worktree add /tmp/before <commit> && cmake --preset openmp -S /tmp/before -B /tmp/before/build/openmp
#   cmake --build /tmp/before/build/openmp --target bench_model bench_descriptor bench_neighbor bench_gemm
#   benchmarks/compare_builds.sh /tmp/before/build/openmp build/openmp [rounds]
# Prints the medians of each benchmark, one line per build and round. 2 threads, bound.
set -euo pipefail
before=${1:?usage: compare_builds.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [rounds]}
after=${2:?usage: compare_builds.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [rounds]}
rounds=${3:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_PROC_BIND=spread OMP_PLACES=threads OPENBLAS_NUM_THREADS=1
run() {  # build_dir label
  local b=$1/benchmarks
  "$b/bench_model" --benchmark_filter='training_gradient_(double|float)/1/|forward_forces_(double|float)/1/' \
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null | grep median | sed "s|^|$2 |"
  for bench in bench_descriptor bench_neighbor; do
    "$b/$bench" --benchmark_filter='/1/' --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
      2>/dev/null | grep median | sed "s|^|$2 |"
  done
  "$b/bench_gemm" --benchmark_filter='26496' --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    2>/dev/null | grep median | sed "s|^|$2 |"
}
uptime
for ((r = 1; r <= rounds; ++r)); do
  run "$before" before
  run "$after" after
done
uptime

#!/bin/bash
# Every measurement of docs/performance.md, in order, into one folder (default docs/sweep):
#   gemm      bench_gemm (square 2000 and the model's 26496x50x100 GEMM, 1 and 2 BLAS threads)
#   threads   threads_study.py: bench_model training gradient under OMP x BLAS x bind x wait
#   model     bench_model (forward, forces, training gradient; batch 1 and 8; float, double) at
#             1 and 2 Kokkos threads, with dpk-train's BLAS default (OPENBLAS_NUM_THREADS=$BLAS)
#   kernels   bench_neighbor and bench_descriptor at 1 and 2 threads
#   scaling   scaling.py on bench_descriptor and bench_neighbor: 1 vs 2 threads per kernel, each
#             run bracketed by dpk-core-probe (ROUNDS rounds, default 7; ~6 + ~4 min)
#   sweep     sweep.py on the water example (CSV + PNG)
# Usage: benchmarks/sweep/measure_all.sh [stage ...]   (default: all stages)
# Environment: BUILD (default build/perf), OUT (default docs/sweep), BLAS (default 1),
#              REPS (benchmark repetitions, default 5), ROUNDS (scaling rounds, default 7).
# Build first: cmake --preset openmp -B build/perf && cmake --build build/perf -j2 --target \
#   dpk-train bench_gemm bench_model bench_neighbor bench_descriptor dpk-core-probe
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/perf}
OUT=${OUT:-docs/sweep}
BLAS=${BLAS:-1}
REPS=${REPS:-5}
PY=/usr/bin/python3
mkdir -p "$OUT"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(gemm threads model kernels sweep)
bind=(OMP_PROC_BIND=spread OMP_PLACES=threads)

note() {  # stage name, then the load average and (when built) dpk-core-probe's two-core check before it
  local probe=""
  [ -x "$BUILD/benchmarks/dpk-core-probe" ] && probe="; $("$BUILD/benchmarks/dpk-core-probe")"
  echo "$(date -u +%H:%M:%S) $1: load average $(cut -d' ' -f1-3 /proc/loadavg)$probe" | tee -a "$OUT/load.txt"
}

bench() {  # name threads program [args...]: console table to $OUT/name.txt, JSON to $OUT/name.json
  local name=$1 threads=$2 program=$3
  shift 3
  note "$name"
  env OMP_NUM_THREADS="$threads" "${bind[@]}" OPENBLAS_NUM_THREADS="${BLAS_FOR_BENCH:-$BLAS}" \
    "$BUILD/benchmarks/$program" --benchmark_repetitions="$REPS" --benchmark_report_aggregates_only=true \
    --benchmark_out="$OUT/$name.json" --benchmark_out_format=json "$@" 2>&1 | grep -v "^Kokkos\|^  " | tee "$OUT/$name.txt"
}

for stage in "${stages[@]}"; do
  case $stage in
    gemm)
      # BLAS threads are set per benchmark (its 4th argument); one Kokkos thread.
      BLAS_FOR_BENCH=2 bench gemm 1 bench_gemm ;;
    threads)
      note threads
      $PY benchmarks/sweep/threads_study.py --bench "$BUILD/benchmarks/bench_model" --repetitions 3 \
        --min-time 0.2 --wait unset passive --csv "$OUT/threads.csv" | tee "$OUT/threads.txt" ;;
    model)
      for t in 1 2; do bench "model_omp$t" "$t" bench_model; done ;;
    kernels)
      for t in 1 2; do
        bench "neighbor_omp$t" "$t" bench_neighbor
        bench "descriptor_omp$t" "$t" bench_descriptor
      done ;;
    scaling)
      for program in descriptor neighbor; do
        note "scaling_$program"
        $PY benchmarks/sweep/scaling.py --bench "$BUILD/benchmarks/bench_$program" --rounds "${ROUNDS:-7}" \
          --csv "$OUT/scaling_$program.csv" | tee "$OUT/scaling_$program.txt"
      done ;;
    sweep)
      note sweep
      $PY benchmarks/sweep/sweep.py --dpk-train "$BUILD/examples/trainer/dpk-train" --csv "$OUT/sweep.csv" \
        --png "$OUT/sweep.png" | tee "$OUT/sweep.txt" ;;
    *) echo "unknown stage $stage (gemm threads model kernels scaling sweep)" >&2; exit 2 ;;
  esac
done
note done

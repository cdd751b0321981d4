#!/usr/bin/env bash
# ms per step and ns/day (0.5 fs steps) of the water box, 192 and 12288 atoms, for LAMMPS +
# pair_style dpk (dpk-lmp) and dpk-md, at 1 and 2 OpenMP threads and (LAMMPS) 1 and 2 MPI
# ranks of 1 thread. docs/md.md lists the results.
# Usage: examples/lammps/bench/bench.sh MODEL [BUILD_DIR (default build/openmp)] [OUT_DIR (default out/lammps-bench)]
#        STEPS_SMALL (default 100) and STEPS_LARGE (default 5) set the steps per run.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
model="$(realpath "$1")"
build="$(realpath "${2:-$root/build/openmp}")"
out="${3:-$root/out/lammps-bench}"
small="${STEPS_SMALL:-100}"
large="${STEPS_LARGE:-5}"
mkdir -p "$out"
out="$(realpath "$out")"
export OMP_PROC_BIND=false OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
python3 "$root/examples/lammps/bench/replicate_system.py" "$root/examples/water/data/data_0" 4 "$out/water_12288" > /dev/null
printf '# load average before: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-10s %6s %5s %7s %6s %10s %9s\n' program atoms ranks threads steps ms/step ns/day
for replicate in 1 4; do
  atoms=$((192 * replicate * replicate * replicate))
  steps=$([ "$replicate" = 1 ] && echo "$small" || echo "$large")
  for config in "1 1" "1 2" "2 1"; do
    read -r ranks threads <<< "$config"
    log="$out/lmp_${atoms}_${ranks}x${threads}.log"
    launcher=()
    if [ "$ranks" -gt 1 ]; then launcher=(mpirun -np "$ranks"); fi
    OMP_NUM_THREADS=$threads "${launcher[@]}" "$build/examples/lammps/dpk-lmp" -in "$root/examples/lammps/water/in.water" \
      -var model "$model" -var data "$root/examples/lammps/water/water.data" -var replicate "$replicate" \
      -var steps "$steps" -var thermo "$steps" -log "$log" -screen none
    # LAMMPS: "Loop time of T on P procs for N steps" (the run, not its setup).
    loop=$(awk '/^Loop time of/ {print $4}' "$log")
    awk -v t="$loop" -v n="$steps" -v a="$atoms" -v r="$ranks" -v th="$threads" 'BEGIN {
      ms = 1000 * t / n; printf "%-10s %6d %5d %7d %6d %10.2f %9.4f\n", "lammps", a, r, th, n, ms, 43.2 / ms }'
  done
  system="$root/examples/water/data/data_0"
  [ "$replicate" = 4 ] && system="$out/water_12288"
  for threads in 1 2; do
    log="$out/md_${atoms}_${threads}.log"
    OMP_NUM_THREADS=$threads "$build/examples/md/dpk-md" -m "$model" -s "$system" -n "$steps" --every "$steps" > "$log"
    # dpk-md: "# N steps (... ps) in T s (X ms/step)"
    ms=$(sed -n 's/^# [0-9]* steps .* in .* s (\([0-9.]*\) ms\/step)$/\1/p' "$log")
    awk -v ms="$ms" -v n="$steps" -v a="$atoms" -v th="$threads" 'BEGIN {
      printf "%-10s %6d %5d %7d %6d %10.2f %9.4f\n", "dpk-md", a, 1, th, n, ms, 43.2 / ms }'
  done
done
printf '# load average after: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"

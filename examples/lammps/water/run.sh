#!/usr/bin/env bash
# Runs the 192-atom water box in LAMMPS with pair_style dpk (dpk-lmp), with the model that
# scripts/train_water.sh trains (out/water/model.dpk; trained first when missing).
# Usage: examples/lammps/water/run.sh [nve|nvt] [steps (default 1000)] [model (default out/water/model.dpk)]
#        DPK_LMP_RANKS=2 ... runs under mpirun -np 2; OMP_NUM_THREADS sets dpk's threads per rank.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ensemble="${1:-nve}"
steps="${2:-1000}"
model="${3:-out/water/model.dpk}"
if [ ! -f "$model" ]; then
  scripts/train_water.sh        # bootstrap (Debian packages incl. LAMMPS), build, train 300 steps
fi
scripts/bootstrap.sh
cmake --preset openmp
cmake --build build/openmp --target dpk-lmp -j "${DPK_BUILD_JOBS:-$(nproc)}"
export OMP_PROC_BIND="${OMP_PROC_BIND:-false}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
launcher=()
if [ "${DPK_LMP_RANKS:-1}" -gt 1 ]; then launcher=(mpirun -np "$DPK_LMP_RANKS"); fi
model="$(realpath "$model")"
mkdir -p out/lammps
cd out/lammps
"${launcher[@]}" ../../build/openmp/examples/lammps/dpk-lmp -in ../../examples/lammps/water/in.water \
  -var model "$model" -var data ../../examples/lammps/water/water.data -var ensemble "$ensemble" -var steps "$steps"
echo "log: out/lammps/log.lammps"

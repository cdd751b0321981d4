#!/usr/bin/env bash
# Set up dependencies, build dpk-train and train DeePMD-kit's water example (its input.json,
# unchanged) for a short run, then evaluate the model on the validation system like `dp test`.
# Usage: scripts/train_water.sh [steps (default 300)] [output dir (default out/water)]
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-300}"
out="${2:-out/water}"
scripts/bootstrap.sh
cmake --preset openmp
cmake --build build/openmp --target dpk-train -j "${DPK_BUILD_JOBS:-$(nproc)}"
export OMP_PROC_BIND="${OMP_PROC_BIND:-spread}" OMP_PLACES="${OMP_PLACES:-threads}"
build/openmp/examples/trainer/dpk-train train examples/water/se_e2_a/input.json --stop-at "$steps" -o "$out"
build/openmp/examples/trainer/dpk-train test -m "$out/model.dpk" -s examples/water/data/data_3
echo
echo "learning curve: $out/lcurve.out"
echo "model:          $out/model.dpk"

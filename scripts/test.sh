#!/usr/bin/env bash
# Set up dependencies, build the openmp preset and run the whole test suite (ctest).
# Usage: scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake --preset openmp
cmake --build build/openmp -j "${DPK_BUILD_JOBS:-$(nproc)}"
ctest --test-dir build/openmp --output-on-failure "$@"

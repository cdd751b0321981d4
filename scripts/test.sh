#!/usr/bin/env bash
# Set up dependencies, build a CPU preset and run the whole test suite (ctest).
# Usage: scripts/test.sh [extra ctest args]
#   DPK_PRESET  configure/build preset (default openmp: Kokkos 3.4.01 from bootstrap.sh);
#               openmp-kokkos4 / openmp-kokkos4-nodeprecated use Kokkos 4.6.01 (bootstrap.sh --kokkos4),
#               openmp-kokkos4-clang the same Kokkos and dpk built by clang 14 (bootstrap.sh --kokkos4-clang)
#   DPK_CMAKE_ARGS  extra configure arguments, split on spaces (e.g. -DDPK_ENABLE_BENCHMARKS=OFF)
#   DPK_BUILD_JOBS / DPK_TEST_JOBS  parallel compile jobs / ctest jobs (default: nproc each)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${DPK_PRESET:-openmp}"
case "$preset" in
  *kokkos4-clang*) scripts/bootstrap.sh --kokkos4-clang ;;
  *kokkos4*) scripts/bootstrap.sh --kokkos4 ;;
  *) scripts/bootstrap.sh ;;
esac
# shellcheck source=scripts/ccache_env.sh
source scripts/ccache_env.sh  # compile through ccache (bootstrap.sh installs it; DPK_CCACHE=0: not)
build_dir=$(python3 -c 'import json,sys; p=[p for p in json.load(open("CMakePresets.json"))["configurePresets"] if p["name"]==sys.argv[1]]; print(p[0].get("binaryDir","").replace("${sourceDir}/","") if p else "")' "$preset")
[ -n "$build_dir" ] || { echo "test.sh: no configure preset '$preset' in CMakePresets.json" >&2; exit 2; }
# shellcheck disable=SC2086  # DPK_CMAKE_ARGS is a space-separated list on purpose
cmake --preset "$preset" -DDPK_ENABLE_BENCHMARKS=ON -DDPK_ENABLE_HEADER_CHECK=ON -DDPK_HEADER_CHECK=each -DDPK_TEST_DEVICE_SCHEDULE=ON ${DPK_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "${DPK_BUILD_JOBS:-$(nproc)}"
ctest --test-dir "$build_dir" --output-on-failure -j "${DPK_TEST_JOBS:-$(nproc)}" "$@"

#!/usr/bin/env bash
# Compile-only check of the CUDA build: configure the `cuda` preset (Kokkos CUDA+OpenMP from
# `scripts/bootstrap.sh --cuda`, nvcc_wrapper + CUDA 11.8 + g++-11, sm_80) and build every
# target of the tree (headers check, tests, benchmarks, trainer) with nvcc. Nothing is run: there
# is no GPU here. A host-only call in a kernel, a lambda capturing host memory or a missing
# KOKKOS_FUNCTION fails the build, and so this script.
#
#   scripts/cuda_check.sh [cmake --build args...]
#   DPK_CUDA_BUILD_DIR   build folder (default build/cuda, the preset's)
#   DPK_BUILD_JOBS       parallel compile jobs (default: nproc)
#   DPK_CUDA_CMAKE_ARGS  extra configure arguments, split on spaces (CI: -DDPK_ENABLE_BENCHMARKS=OFF)
#   DPK_CUDA_HOST_OPT    the host compiler's optimisation level for this check, e.g. -O0 (CI),
#                        instead of the preset's Release -O3: nvcc's -O is the host code's level
#                        (device code is optimised either way), and a compile check runs nothing;
#                        -O0 halved nvcc's time per test (test_descriptor.cpp: 72.7 s -> 35.4 s)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ccache_env.sh
source scripts/ccache_env.sh  # compile through ccache when installed (DPK_CCACHE=0: not)
say() { printf '[cuda_check] %s\n' "$*"; }
die() { printf '[cuda_check] error: %s\n' "$*" >&2; exit 1; }

wrapper=/opt/dpk-deps/kokkos-cuda/bin/nvcc_wrapper
[ -x "$wrapper" ] || die "$wrapper not found: run scripts/bootstrap.sh --cuda first"
build_dir="${DPK_CUDA_BUILD_DIR:-build/cuda}"
jobs="${DPK_BUILD_JOBS:-$(nproc)}"
start=$(date +%s)
mkdir -p "$build_dir"
cfg_log="$build_dir/dpk_cuda_configure.log" build_log="$build_dir/dpk_cuda_build.log"

say "configure (preset cuda) in $build_dir"
# shellcheck disable=SC2086  # a space-separated list on purpose
host_opt=()
if [ -n "${DPK_CUDA_HOST_OPT:-}" ]; then
  case "$DPK_CUDA_HOST_OPT" in -O0|-O1|-O2|-O3|-Os) ;; *) die "DPK_CUDA_HOST_OPT must be one of -O0 -O1 -O2 -O3 -Os, got '$DPK_CUDA_HOST_OPT'" ;; esac
  host_opt=("-DCMAKE_CXX_FLAGS_RELEASE=$DPK_CUDA_HOST_OPT -DNDEBUG")
fi
cmake --preset cuda -B "$build_dir" -DDPK_ENABLE_BENCHMARKS=ON -DDPK_ENABLE_EXAMPLES=ON -DDPK_ENABLE_HEADER_CHECK=ON ${DPK_CUDA_CMAKE_ARGS:-} \
  "${host_opt[@]}" >"$cfg_log" 2>&1 \
  || { cat "$cfg_log" >&2; die "configure failed (log: $cfg_log)"; }
grep -E '^-- (dpk|Kokkos|Found MPI|The CXX)' "$cfg_log" || true
compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
case "$compiler" in *nvcc_wrapper) ;; *) die "configured compiler is '$compiler', not nvcc_wrapper" ;; esac
# The CUDA runtime Kokkos links must be CUDA 11.8's (not, e.g., a newer CUDA's in /usr/local/lib).
kokkos_dir=$(sed -n 's/^Kokkos_DIR:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
cudart=$(grep -h -A3 'CUDA::cudart PROPERTIES' "$kokkos_dir"/KokkosConfig*.cmake 2>/dev/null | sed -n 's/.*IMPORTED_LOCATION "\(.*\)".*/\1/p' | head -n1)
case "$cudart" in ""|*/cuda-11.8/*|/usr/lib/x86_64-linux-gnu/*) ;;
  *) die "Kokkos in $kokkos_dir links the CUDA runtime $cudart, not Debian's CUDA 11.8: re-run scripts/bootstrap.sh --cuda" ;; esac
targets=$(cmake --build "$build_dir" --target help | sed -n 's/^\.\.\. \([A-Za-z0-9_.+-]*\).*/\1/p' \
  | grep -v -x -E 'all|clean|depend|edit_cache|rebuild_cache|install|install/local|install/strip|list_install_components|test' | tr '\n' ' ')
say "targets: $targets"

# -k: keep going, so one run reports every translation unit that fails under nvcc.
set +e
cmake --build "$build_dir" -j "$jobs" "$@" -- -k 2>&1 | tee "$build_log" \
  | grep --line-buffered -E '^\[ *[0-9]+%\] (Building|Linking)|error|Error|warning #|Built target'
status=${PIPESTATUS[0]}
set -e
elapsed=$(( $(date +%s) - start ))
if [ "$status" != 0 ]; then
  say "FAILED after ${elapsed} s; errors (full log: $build_log):"
  grep -E 'error' "$build_log" | grep -v -E '^make|gmake' | sort -u | head -60 >&2
  exit 1
fi
what="every configured target"; [ "$#" -gt 0 ] && what="requested targets ($*)"
say "$what compiled with nvcc ($($wrapper --version 2>/dev/null | sed -n 's/.*\(release [0-9.]*\).*/CUDA \1/p'), host $(g++-11 -dumpfullversion 2>/dev/null | sed 's/^/g++ /') ${DPK_CUDA_HOST_OPT:--O3}) in ${elapsed} s"

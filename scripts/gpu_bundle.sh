#!/usr/bin/env bash
# Build a self-contained GPU bundle: the test binaries and the trainer compiled with CUDA 11.8,
# CUDA runtime, libstdc++ and libgcc linked statically, Kokkos Kernels' native GEMM (no cuBLAS:
# CUDA 11's cuBLAS is far too large to ship), no MPI and no OpenMP, plus the water data, the test
# data and a run script. Two targets (DPK_BUNDLE_ARCH):
#   hopper90 (default)  Kokkos 4.6.01 built for Kokkos_ARCH_HOPPER90: native sm_90 code for
#                       H100/H200 (scripts/bootstrap.sh --gpu-bundle-hopper)
#   ampere80            Kokkos 3.4.01 built for Kokkos_ARCH_AMPERE80: sm_80 SASS + compute_80 PTX,
#                       which the driver JIT-compiles for newer GPUs (scripts/bootstrap.sh --gpu-bundle)
# On a GPU host (any Linux x86_64 with an NVIDIA driver recent enough for CUDA 11.8, glibc >= the
# one listed in MANIFEST.txt):
#
#   tar -xzf dpk-gpu-bundle.tar.gz && dpk-gpu-bundle/run.sh [device] [steps]  # tests + short training
#
#   scripts/gpu_bundle.sh [OUTPUT.tar.gz]    (default build/dpk-gpu-bundle.tar.gz)
#   DPK_BUNDLE_ARCH       hopper90 (default) or ampere80
#   DPK_BUNDLE_BUILD_DIR  build folder (default build/gpu-bundle-<arch>)
#   DPK_BUILD_JOBS        parallel compile jobs (default: nproc)
#   DPK_BUNDLE_TARGETS    only these targets (space-separated; default every executable target)
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '[gpu_bundle] %s\n' "$*"; }
die() { printf '[gpu_bundle] error: %s\n' "$*" >&2; exit 1; }

out="${1:-build/dpk-gpu-bundle.tar.gz}"
arch="${DPK_BUNDLE_ARCH:-hopper90}"
build_dir="${DPK_BUNDLE_BUILD_DIR:-build/gpu-bundle-$arch}"
jobs="${DPK_BUILD_JOBS:-$(nproc)}"
deps="${DPK_DEPS_PREFIX:-/opt/dpk-deps}"
case "$arch" in
  hopper90) prefix="$deps/kokkos4-cuda-bundle-hopper" bootstrap_flag=--gpu-bundle-hopper
            kokkos_line="Kokkos 4.6.01 CUDA + Serial, Kokkos_ARCH_HOPPER90 (sm_90 SASS)" ;;
  ampere80) prefix="$deps/kokkos-cuda-bundle" bootstrap_flag=--gpu-bundle
            kokkos_line="Kokkos 3.4.01 CUDA + Serial, Kokkos_ARCH_AMPERE80 (sm_80 SASS + PTX), CUDA_LAMBDA" ;;
  *) die "DPK_BUNDLE_ARCH='$arch': expected hopper90 or ampere80" ;;
esac
limit_mb=60
start=$(date +%s)

scripts/bootstrap.sh "$bootstrap_flag"

# As the cuda preset: a host-only call or a `this` capture in a kernel is an error, not a warning.
strict_flags=$(python3 -c 'import json; print([p for p in json.load(open("CMakePresets.json"))["configurePresets"] if p["name"] == "cuda"][0]["cacheVariables"]["CMAKE_CXX_FLAGS"])')
say "configure $build_dir ($arch: $kokkos_line; static cudart/libstdc++, no MPI, no cuBLAS)"
mkdir -p "$build_dir"
cmake -S . -B "$build_dir" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$prefix/bin/nvcc_wrapper" -DCMAKE_PREFIX_PATH="$prefix" \
  -DDPK_ENABLE_MPI=OFF -DDPK_ENABLE_INTEROP=OFF -DDPK_ENABLE_BENCHMARKS=OFF -DDPK_ENABLE_TESTS=ON -DDPK_ENABLE_EXAMPLES=ON \
  -DDPK_TEST_SOURCE_DIR=. -DDPK_TEST_DATA_DIR=./tests/data \
  -DCMAKE_CXX_FLAGS="$strict_flags" -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >"$build_dir/dpk_bundle_configure.log" 2>&1 \
  || { tail -40 "$build_dir/dpk_bundle_configure.log" >&2; die "configure failed"; }
grep -q '^#define KOKKOSKERNELS_ENABLE_TPL_CUBLAS' "$prefix/include/KokkosKernels_config.h" && die "bundle Kokkos Kernels has cuBLAS enabled"

# Every executable target (tests, trainer, examples); not the header check (compile-only).
targets=$(cmake --build "$build_dir" --target help | sed -n 's/^\.\.\. \([A-Za-z0-9_.+-]*\).*/\1/p' \
  | grep -v -x -E 'all|clean|depend|edit_cache|rebuild_cache|install|install/local|install/strip|list_install_components|test|dpk_header_check' || true)
[ -z "${DPK_BUNDLE_TARGETS:-}" ] || targets="$DPK_BUNDLE_TARGETS"   # e.g. a quick check of a few targets
[ -n "$targets" ] || die "no targets to build"
say "building: $(echo $targets)"
build_ok=1
# shellcheck disable=SC2086
cmake --build "$build_dir" -j "$jobs" --target $targets -- -k >"$build_dir/dpk_bundle_build.log" 2>&1 || build_ok=0
if [ "$build_ok" = 0 ]; then
  grep -E 'error' "$build_dir/dpk_bundle_build.log" | grep -v -E '^g?make' | sort -u | head -30 >&2
  say "some targets failed to build (log: $build_dir/dpk_bundle_build.log); bundling those that built"
fi

stage_root="$build_dir/stage"
stage="$stage_root/dpk-gpu-bundle"
rm -rf "$stage_root" && mkdir -p "$stage/bin" "$stage/tests" "$stage/examples"
mapfile -t exes < <(find "$build_dir/tests" "$build_dir/examples" -path '*/CMakeFiles' -prune -o -type f -perm -u+x -print 2>/dev/null | sort)
[ "${#exes[@]}" -gt 0 ] || die "no executables were built"
for exe in "${exes[@]}"; do
  cp "$exe" "$stage/bin/"
  strip --strip-unneeded "$stage/bin/$(basename "$exe")" 2>/dev/null || true
done
cp -r tests/data "$stage/tests/data"
cp -r examples/water "$stage/examples/water"

cat >"$stage/run.sh" <<'RUN'
#!/bin/sh
# dpk GPU bundle: runs every test binary on the GPU, then a short training of the water example
# (its input.json unchanged, stopped early with --stop-at) and `dpk-train test` of the result.
# Usage: ./run.sh [device id, default 0] [training steps, default 300]. Needs only an NVIDIA driver.
cd "$(dirname "$0")" || exit 1
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-${1:-0}}"
steps="${2:-300}"
export CUDA_CACHE_PATH="${CUDA_CACHE_PATH:-$PWD/.nv-cache}"   # PTX JIT cache (GPUs newer than sm_80)
export CUDA_CACHE_MAXSIZE="${CUDA_CACHE_MAXSIZE:-4294967296}"
mkdir -p results
echo "== dpk GPU bundle: $(cat VERSION 2>/dev/null); CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fail=0
for t in bin/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  start=$(date +%s)
  if "$t" >"results/$name.log" 2>&1; then status=PASS; else status=FAIL; fail=$((fail + 1)); fi
  echo "$status  $name  ($(( $(date +%s) - start )) s; log results/$name.log)"
  [ "$status" = FAIL ] && tail -n 25 "results/$name.log"
done
if [ -x bin/dpk-train ]; then
  start=$(date +%s)
  if bin/dpk-train train examples/water/se_e2_a/input.json --output results/train --stop-at "$steps" \
      >results/train.log 2>&1; then status=PASS; else status=FAIL; fail=$((fail + 1)); fi
  echo "$status  dpk-train train, water, $steps steps ($(( $(date +%s) - start )) s; log results/train.log)"
  tail -n 15 results/train.log
  [ -f results/train/lcurve.out ] && { echo "-- lcurve.out (last lines)"; tail -n 5 results/train/lcurve.out; }
  model=$(ls results/train/model.dpk results/train/*.dpk 2>/dev/null | head -n 1)
  if [ -n "$model" ]; then
    if bin/dpk-train test -m "$model" -s examples/water/data/data_3 -n 20 >results/test.log 2>&1; then status=PASS
    else status=FAIL; fail=$((fail + 1)); fi
    echo "$status  dpk-train test on data_3 (log results/test.log)"; tail -n 8 results/test.log
  fi
else
  echo "SKIP  dpk-train (not in this bundle)"
fi
echo "== $fail failure(s); logs in $PWD/results"
[ "$fail" = 0 ]
RUN
chmod 755 "$stage/run.sh"

{
  echo "dpk $(git describe --always --dirty 2>/dev/null || echo unknown), built $(date -u +%Y-%m-%dT%H:%MZ)"
} >"$stage/VERSION"
{
  echo "dpk GPU bundle — $(cat "$stage/VERSION")"
  echo "Toolchain: $("$deps/cuda-11.8/bin/nvcc" --version | grep release), host $(g++-11 --version | head -n1)"
  echo "Kokkos: $kokkos_line; Kokkos Kernels native GEMM (no cuBLAS)"
  echo; echo "Binaries and their shared-library needs (everything else is linked statically):"
  for f in "$stage"/bin/*; do
    echo "  $(basename "$f"): $(objdump -p "$f" | awk '/NEEDED/ {print $2}' | tr '\n' ' ')"
  done
  echo; echo "Newest glibc symbol version required: $(objdump -T "$stage"/bin/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n1)"
  if command -v cuobjdump >/dev/null; then
    echo; echo "Embedded GPU code (first binary):"
    first=$(ls "$stage"/bin/* | head -n1)
    cuobjdump --list-elf "$first" 2>/dev/null | sed 's/^/  /' | sort -u | head -n 3
    cuobjdump --list-ptx "$first" 2>/dev/null | sed 's/^/  /' | sort -u | head -n 3
  fi
} >"$stage/MANIFEST.txt"

mkdir -p "$(dirname "$out")"
tar -C "$stage_root" -czf "$out" dpk-gpu-bundle
size_mb=$(( ($(stat -c %s "$out") + 1048575) / 1048576 ))
cat "$stage/MANIFEST.txt"
say "bundle $out: ${size_mb} MB ($(ls "$stage/bin" | wc -l) binaries) in $(( $(date +%s) - start )) s"
[ "$size_mb" -le "$limit_mb" ] || die "bundle is ${size_mb} MB, over the ${limit_mb} MB limit"
[ "$build_ok" = 1 ] || die "bundle written, but some targets failed to compile (see above)"

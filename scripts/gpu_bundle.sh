#!/usr/bin/env bash
# Build a self-contained GPU bundle: the test binaries and the trainer compiled with CUDA 11.8,
# CUDA runtime, libstdc++ and libgcc linked statically, Kokkos Kernels' native GEMM (no cuBLAS:
# CUDA 11's cuBLAS is far too large to ship), no MPI and no OpenMP, plus the water data, the test
# data and a run script. Three targets (DPK_BUNDLE_ARCH):
#   hopper90 (default)  Kokkos 4.6.01 built for Kokkos_ARCH_HOPPER90: native sm_90 code for
#                       H100/H200 (scripts/bootstrap.sh --gpu-bundle-hopper)
#   hopper90-cublas     the same, with Kokkos Kernels' GEMMs through cuBLAS 13: the binaries need
#                       libcublas.so.13 + libcublasLt.so.13 from the GPU host (CUDA 13, or
#                       PyTorch's nvidia/cu13/lib; run.sh finds the latter), not shipped
#                       (scripts/bootstrap.sh --gpu-bundle-hopper-cublas)
#   ampere80            Kokkos 3.4.01 built for Kokkos_ARCH_AMPERE80: sm_80 SASS + compute_80 PTX,
#                       which the driver JIT-compiles for newer GPUs (scripts/bootstrap.sh --gpu-bundle)
# On a GPU host (any Linux x86_64 with an NVIDIA driver recent enough for CUDA 11.8, glibc >= the
# one listed in MANIFEST.txt):
#
#   tar -xzf dpk-gpu-bundle.tar.gz && dpk-gpu-bundle/run.sh [device] [steps]  # tests, training, benchmarks
#
#   scripts/gpu_bundle.sh [OUTPUT.tar.gz]    (default build/dpk-gpu-bundle.tar.gz)
#   DPK_BUNDLE_ARCH       hopper90 (default) or ampere80
#   DPK_BUNDLE_BUILD_DIR  build folder (default build/gpu-bundle-<arch>)
#   DPK_BUILD_JOBS        parallel compile jobs (default: nproc)
#   DPK_BUNDLE_TARGETS    only these targets (space-separated; default every executable target)
#   DPK_BUNDLE_BENCHMARKS 1 (default) also the Google Benchmark programs and the kernel-times tool
#                         (libbenchmark's shared library ships in lib/: Debian has no static one)
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
  hopper90-cublas) prefix="$deps/kokkos4-cuda-bundle-hopper-cublas" bootstrap_flag=--gpu-bundle-hopper-cublas
            kokkos_line="Kokkos 4.6.01 CUDA + Serial, Kokkos_ARCH_HOPPER90 (sm_90 SASS)" ;;
  ampere80) prefix="$deps/kokkos-cuda-bundle" bootstrap_flag=--gpu-bundle
            kokkos_line="Kokkos 3.4.01 CUDA + Serial, Kokkos_ARCH_AMPERE80 (sm_80 SASS + PTX), CUDA_LAMBDA" ;;
  *) die "DPK_BUNDLE_ARCH='$arch': expected hopper90, hopper90-cublas or ampere80" ;;
esac
# cuBLAS: the hopper90-cublas bundle links libcublas.so.13 (the copy bootstrap unpacked, for the
# linker only) and may need it at run time; every other bundle uses the native GEMM.
gemm_line="Kokkos Kernels native GEMM (no cuBLAS)"
cublas_link="" shippable_cublas="^$"
if [ "$arch" = hopper90-cublas ]; then
  gemm_line="Kokkos Kernels GEMM through cuBLAS 13 (libcublas.so.13 + libcublasLt.so.13 from the GPU host, not shipped)"
  cublas_link="-Wl,-rpath-link,$deps/cublas13/lib" shippable_cublas="^libcublas\\.so\\.13$"
fi
limit_mb=60
bench="${DPK_BUNDLE_BENCHMARKS:-1}"
case "$bench" in 1) bench_cmake=ON ;; 0) bench_cmake=OFF ;; *) die "DPK_BUNDLE_BENCHMARKS='$bench': expected 0 or 1" ;; esac
start=$(date +%s)

scripts/bootstrap.sh "$bootstrap_flag"

# As the cuda preset: a host-only call or a `this` capture in a kernel is an error, not a warning.
strict_flags=$(python3 -c 'import json; print([p for p in json.load(open("CMakePresets.json"))["configurePresets"] if p["name"] == "cuda"][0]["cacheVariables"]["CMAKE_CXX_FLAGS"])')
say "configure $build_dir ($arch: $kokkos_line; static cudart/libstdc++, no MPI; $gemm_line)"
mkdir -p "$build_dir"
# Kokkos 4's package config looks for the CUDA toolkit (FindCUDAToolkit): root it at the CUDA 11.8
# shim, not at a newer CUDA that the machine may carry on PATH or in /usr/local/cuda (CUDA 13's
# headers with Kokkos built for 11.8 fail in Kokkos_Cuda_Instance.hpp; CUDA 13's static runtime).
export PATH="$deps/cuda-11.8/bin:/usr/bin:$PATH"
# Kokkos 4 links CUDA::cudart, which FindCUDAToolkit makes the shared runtime (libcudart.so.11.0,
# absent on a CUDA 12/13 host): point it at the static one.
cmake -S . -B "$build_dir" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="$deps/cuda-11.8" \
  -DCUDA_cudart_LIBRARY="$deps/cuda-11.8/lib64/libcudart_static.a" \
  -DCMAKE_CXX_COMPILER="$prefix/bin/nvcc_wrapper" -DCMAKE_PREFIX_PATH="$prefix" \
  -DDPK_ENABLE_MPI=OFF -DDPK_ENABLE_INTEROP=OFF -DCMAKE_DISABLE_FIND_PACKAGE_LAMMPS=ON -DDPK_ENABLE_BENCHMARKS=$bench_cmake -DDPK_ENABLE_TESTS=ON -DDPK_ENABLE_EXAMPLES=ON \
  -DDPK_TEST_SOURCE_DIR=. -DDPK_TEST_DATA_DIR=./tests/data \
  -DCMAKE_CXX_FLAGS="$strict_flags" -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc $cublas_link" >"$build_dir/dpk_bundle_configure.log" 2>&1 \
  || { tail -40 "$build_dir/dpk_bundle_configure.log" >&2; die "configure failed"; }
if [ "$arch" = hopper90-cublas ]; then
  grep -q '^#define KOKKOSKERNELS_ENABLE_TPL_CUBLAS' "$prefix/include/KokkosKernels_config.h" || die "$prefix: Kokkos Kernels without cuBLAS"
else
  grep -q '^#define KOKKOSKERNELS_ENABLE_TPL_CUBLAS' "$prefix/include/KokkosKernels_config.h" && die "bundle Kokkos Kernels has cuBLAS enabled"
fi

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
rm -rf "$stage_root" && mkdir -p "$stage/bin" "$stage/lib" "$stage/tests" "$stage/examples"
mapfile -t exes < <(find "$build_dir/tests" "$build_dir/examples" "$build_dir/benchmarks" -path '*/CMakeFiles' -prune \
  -o -type f -perm -u+x ! -name '*.so' -print 2>/dev/null | sort)
[ "${#exes[@]}" -gt 0 ] || die "no executables were built"
for exe in "${exes[@]}"; do
  cp "$exe" "$stage/bin/"
  strip --strip-unneeded "$stage/bin/$(basename "$exe")" 2>/dev/null || true
done
# Only the driver (libcuda.so.1), glibc and lib/ may be needed at run time.
for exe in "$stage"/bin/*; do
  unshippable=$(objdump -p "$exe" | awk '/NEEDED/ {print $2}' | grep -v -E "$shippable_cublas" | grep -E '^lib(cudart|cublas|stdc\+\+|gomp)' | tr '\n' ' ' || true)
  [ -z "$unshippable" ] || die "$(basename "$exe") needs ${unshippable}(a bundle binary may need only glibc, libcuda.so.1 and lib/)"
done
# The kernel-times tool (a Kokkos Tools library: per-kernel time, fenced by Kokkos 4 by default)
# and the one shared library the benchmarks need beyond glibc and the driver.
find "$build_dir/benchmarks" -maxdepth 1 -name 'libdpk-kernel-times.so' -exec cp {} "$stage/lib/" \;
if ls "$stage"/bin/bench_* >/dev/null 2>&1; then
  gbench=$(ldd "$(ls "$stage"/bin/bench_* | head -n1)" | awk '/libbenchmark/ {print $3}')
  [ -n "$gbench" ] && cp -L "$gbench" "$stage/lib/"
fi
cp -r tests/data "$stage/tests/data"
cp -r examples/water "$stage/examples/water"

cp scripts/gpu_bundle_run.sh "$stage/run.sh"
chmod 755 "$stage/run.sh"

{
  echo "dpk $(git describe --always --dirty 2>/dev/null || echo unknown), built $(date -u +%Y-%m-%dT%H:%MZ)"
} >"$stage/VERSION"
{
  echo "dpk GPU bundle — $(cat "$stage/VERSION")"
  echo "Toolchain: $("$deps/cuda-11.8/bin/nvcc" --version | grep release), host $(g++-11 --version | head -n1)"
  echo "Kokkos: $kokkos_line; $gemm_line"
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

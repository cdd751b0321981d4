#!/usr/bin/env bash
# dpk dependency bootstrap for Debian 12.
#
#   scripts/bootstrap.sh            Debian packages + Kokkos/Kokkos Kernels (Serial+OpenMP)
#   scripts/bootstrap.sh --cuda     additionally CUDA 11.8 + g++-11 + Kokkos (CUDA+OpenMP, sm_80,
#                                   Kokkos Kernels with cuBLAS) in $DPK_DEPS_PREFIX/kokkos-cuda
#   scripts/bootstrap.sh --gpu-bundle  additionally a Kokkos (CUDA+Serial, sm_80, static CUDA
#                                   runtime, native Kokkos Kernels GEMM: no cuBLAS/BLAS) for
#                                   scripts/gpu_bundle.sh, in $DPK_DEPS_PREFIX/kokkos-cuda-bundle
#   scripts/bootstrap.sh --kokkos4  additionally Kokkos 4.6.01 + Kokkos Kernels 4.6.02 (Serial+
#                                   OpenMP, BLAS TPL) from the release tarballs in ../shared/deps
#                                   (or $DPK_KOKKOS4_SOURCES), twice: $DPK_DEPS_PREFIX/kokkos4-openmp
#                                   and, with Kokkos_ENABLE_DEPRECATED_CODE_4=OFF (what Kokkos 5
#                                   removes) and as C++20 (what Kokkos 5 requires),
#                                   $DPK_DEPS_PREFIX/kokkos4-openmp-nodeprecated
#   scripts/bootstrap.sh --kokkos4-clang  additionally the same Kokkos 4.6.01 + Kernels 4.6.02
#                                   (without deprecated code, as C++20) built by Debian's clang 14
#                                   with LLVM's OpenMP (libomp-14-dev), in
#                                   $DPK_DEPS_PREFIX/kokkos4-openmp-clang (preset openmp-kokkos4-clang)
#   scripts/bootstrap.sh --gpu-bundle-hopper  additionally the bundle Kokkos built from 4.6.01 for
#                                   Hopper (Kokkos_ARCH_HOPPER90, sm_90), in
#                                   $DPK_DEPS_PREFIX/kokkos4-cuda-bundle-hopper
#   scripts/bootstrap.sh --gpu-bundle-hopper-cublas  additionally the same Kokkos with Kokkos
#                                   Kernels' cuBLAS TPL linked to cuBLAS 13 (libcublas.so.13 from
#                                   PyPI's nvidia-cublas wheel, for linking only: a GPU host brings
#                                   its own), in $DPK_DEPS_PREFIX/kokkos4-cuda-bundle-hopper-cublas
#
# Kokkos is built from Debian's `trilinos` source package (Kokkos 3.4.01) only when no usable
# Kokkos is found (Kokkos_ROOT / CMAKE_PREFIX_PATH / the cache prefix). Installs are cached in
# DPK_DEPS_PREFIX (default /opt/dpk-deps); re-running is a no-op that takes seconds.
set -euo pipefail

PREFIX_ROOT="${DPK_DEPS_PREFIX:-/opt/dpk-deps}"
KOKKOS_PREFIX="$PREFIX_ROOT/kokkos-openmp"
KOKKOS_CUDA_PREFIX="$PREFIX_ROOT/kokkos-cuda"
KOKKOS_BUNDLE_PREFIX="$PREFIX_ROOT/kokkos-cuda-bundle"
SRC_CACHE="$PREFIX_ROOT/src"
JOBS="${DPK_BUILD_JOBS:-$(nproc)}"
KOKKOS4_PREFIX="$PREFIX_ROOT/kokkos4-openmp"
KOKKOS4_NODEP_PREFIX="$PREFIX_ROOT/kokkos4-openmp-nodeprecated"
KOKKOS4_CLANG_PREFIX="$PREFIX_ROOT/kokkos4-openmp-clang"
KOKKOS4_BUNDLE_HOPPER_PREFIX="$PREFIX_ROOT/kokkos4-cuda-bundle-hopper"
KOKKOS4_BUNDLE_CUBLAS_PREFIX="$PREFIX_ROOT/kokkos4-cuda-bundle-hopper-cublas"
CUBLAS13_DIR="$PREFIX_ROOT/cublas13"
CUBLAS13_WHEEL=nvidia-cublas==13.10.0.20
KOKKOS4_VERSION=4.6.01
KOKKOS_KERNELS4_VERSION=4.6.02
KOKKOS4_SOURCES="${DPK_KOKKOS4_SOURCES:-$(cd "$(dirname "$0")/.." && pwd)/../shared/deps}"
WANT_CUDA=0
WANT_BUNDLE=0
WANT_KOKKOS4=0
WANT_KOKKOS4_CLANG=0
WANT_BUNDLE_HOPPER=0
WANT_BUNDLE_CUBLAS=0
WANT_CUDA34=0
for arg in "$@"; do
  case "$arg" in
    --cuda) WANT_CUDA=1; WANT_CUDA34=1 ;;
    --gpu-bundle) WANT_CUDA=1; WANT_CUDA34=1; WANT_BUNDLE=1 ;;
    --kokkos4) WANT_KOKKOS4=1 ;;
    --kokkos4-clang) WANT_KOKKOS4_CLANG=1 ;;
    --gpu-bundle-hopper) WANT_CUDA=1; WANT_BUNDLE_HOPPER=1; WANT_KOKKOS4=1 ;;
    --gpu-bundle-hopper-cublas) WANT_CUDA=1; WANT_BUNDLE_HOPPER=1; WANT_BUNDLE_CUBLAS=1; WANT_KOKKOS4=1 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "bootstrap: unknown option '$arg' (expected --cuda, --gpu-bundle, --kokkos4, --kokkos4-clang, --gpu-bundle-hopper, --gpu-bundle-hopper-cublas or --help)" >&2; exit 2 ;;
  esac
done

T0=$(date +%s)
say() { printf '[bootstrap %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { printf '[bootstrap] error: %s\n' "$*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: run as root or install the packages listed in docs/install.md"
  SUDO="sudo"
fi

# --------------------------------------------------------------------------- apt sources
APT_UPDATED=0
apt_update() { if [ "$APT_UPDATED" = 0 ]; then say "apt-get update"; $SUDO apt-get update -qq; APT_UPDATED=1; fi; }

# Adds a deb822 source file: deb-src for the mirror's main component (for `apt-get source`),
# and with --cuda the binary contrib/non-free components (Debian's nvidia-cuda-toolkit).
ensure_sources() {
  local want_nonfree="$1" file="/etc/apt/sources.list.d/dpk-extra.sources"
  local uri="http://deb.debian.org/debian" found
  found=$(grep -h -m1 '^URIs:' /etc/apt/sources.list.d/debian.sources 2>/dev/null | awk '{print $2}') || true
  [ -n "$found" ] && uri="$found"
  local body="Types: deb-src
URIs: $uri
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
  if [ "$want_nonfree" = 1 ] || grep -q non-free "$file" 2>/dev/null; then
    body="$body

Types: deb
URIs: $uri
Suites: bookworm bookworm-updates
Components: contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
  fi
  if [ -f "$file" ] && [ "$(cat "$file")" = "$body" ]; then return; fi
  say "writing $file (deb-src main$([ "$want_nonfree" = 1 ] && echo ', contrib non-free') for $uri)"
  printf '%s\n' "$body" | $SUDO tee "$file" >/dev/null
  APT_UPDATED=0
}

apt_install() {
  local missing=()
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    apt_update
    say "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
      || die "apt-get install failed for: ${missing[*]}"
  else
    say "Debian packages present: $*"
  fi
}

PKGS=(build-essential cmake ccache pkg-config dpkg-dev libopenmpi-dev openmpi-bin libopenblas-dev
      doctest-dev nlohmann-json3-dev libcli11-dev libbenchmark-dev python3 python3-numpy python3-matplotlib
      libhdf5-dev libyaml-cpp-dev lammps liblammps-dev clang libomp-14-dev libfuzzer-14-dev libclang-rt-14-dev
      time)
ensure_sources "$WANT_CUDA"
apt_install "${PKGS[@]}"

# --------------------------------------------------------------------------- trilinos source
fetch_trilinos() {
  local src_dir="$SRC_CACHE/trilinos"
  if [ -d "$src_dir/packages/kokkos" ] && [ -d "$src_dir/packages/kokkos-kernels" ]; then echo "$src_dir"; return; fi
  $SUDO mkdir -p "$SRC_CACHE"
  local tarball
  tarball=$(ls "$SRC_CACHE"/trilinos_*.orig.tar.* 2>/dev/null | head -n1 || true)
  if [ -z "$tarball" ]; then
    apt_update >&2
    say "apt-get source --download-only trilinos (about 166 MB)" >&2
    (cd "$SRC_CACHE" && $SUDO apt-get source -qq --download-only trilinos >&2) \
      || die "could not download Debian's trilinos source package (is a deb-src line present?)"
    tarball=$(ls "$SRC_CACHE"/trilinos_*.orig.tar.* | head -n1)
  fi
  say "extracting Kokkos and Kokkos Kernels from $(basename "$tarball")" >&2
  local tmp="$SRC_CACHE/extract.$$"
  $SUDO mkdir -p "$tmp"
  $SUDO tar -xf "$tarball" -C "$tmp" --wildcards 'Trilinos-*/packages/kokkos/*' 'Trilinos-*/packages/kokkos-kernels/*'
  $SUDO rm -rf "$src_dir"
  $SUDO mv "$tmp"/Trilinos-* "$src_dir"
  $SUDO rm -rf "$tmp"
  echo "$src_dir"
}

# Kokkos 4.6 release tarballs (../shared/deps), checked against SHA256SUMS and extracted once
# into $SRC_CACHE/kokkos-<version> and $SRC_CACHE/kokkos-kernels-<version>.
fetch_kokkos4() {
  local name
  for name in "kokkos-$KOKKOS4_VERSION" "kokkos-kernels-$KOKKOS_KERNELS4_VERSION"; do
    [ -f "$SRC_CACHE/$name/CMakeLists.txt" ] && continue
    local tarball="$KOKKOS4_SOURCES/$name.tar.gz"
    [ -f "$tarball" ] || die "$tarball not found: Kokkos 4 sources are expected in ../shared/deps (or set DPK_KOKKOS4_SOURCES to the folder holding $name.tar.gz)"
    if [ -f "$KOKKOS4_SOURCES/SHA256SUMS" ]; then
      (cd "$KOKKOS4_SOURCES" && grep " $name.tar.gz\$" SHA256SUMS | sha256sum -c --quiet -) >&2 \
        || die "$tarball does not match $KOKKOS4_SOURCES/SHA256SUMS"
    fi
    say "extracting $name.tar.gz" >&2
    $SUDO mkdir -p "$SRC_CACHE"
    $SUDO rm -rf "$SRC_CACHE/$name" "$SRC_CACHE/$name.partial"
    $SUDO mkdir -p "$SRC_CACHE/$name.partial"
    $SUDO tar -xzf "$tarball" -C "$SRC_CACHE/$name.partial" --strip-components=1
    $SUDO mv "$SRC_CACHE/$name.partial" "$SRC_CACHE/$name"
  done
}

# build_kernels PREFIX NAME [extra cmake args...]
# Kokkos Kernels from KERNELS_SRC (ETI off, host BLAS TPL unless the arguments or KK_EXTRA turn it
# off: a later -D wins) into PREFIX.partial, against the Kokkos already installed there.
build_kernels() {
  local prefix="$1" name="$2"; shift 2
  local build="$SRC_CACHE/build-$name"
  say "building Kokkos Kernels ($name, ETI off)"
  $SUDO cmake -S "$KERNELS_SRC" -B "$build/kernels" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$prefix.partial" -DKokkos_ROOT="$prefix.partial" -DCMAKE_CXX_STANDARD=17 \
      -DKokkosKernels_ADD_DEFAULT_ETI=OFF -DKokkosKernels_ENABLE_TPL_BLAS=ON -DKokkosKernels_ENABLE_TESTS=OFF \
      -DKokkosKernels_ENABLE_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
      "${KK_EXTRA[@]}" "$@" >"$build.kernels.log" 2>&1 \
    || { tail -30 "$build.kernels.log" >&2; die "Kokkos Kernels configure failed (log: $build.kernels.log)"; }
  $SUDO cmake --build "$build/kernels" -j "$JOBS" >>"$build.kernels.log" 2>&1 && $SUDO cmake --install "$build/kernels" >>"$build.kernels.log" 2>&1 \
    || { tail -30 "$build.kernels.log" >&2; die "Kokkos Kernels build failed (log: $build.kernels.log)"; }
}

# build_kokkos PREFIX NAME [extra cmake args...]
# Sources: KOKKOS_SRC / KERNELS_SRC when set (Kokkos 4), else Debian's trilinos (Kokkos 3.4).
build_kokkos() {
  local prefix="$1" name="$2"; shift 2
  local kokkos_src="${KOKKOS_SRC:-}" kernels_src="${KERNELS_SRC:-}"
  if [ -z "$kokkos_src" ]; then
    local src; src=$(fetch_trilinos)
    kokkos_src="$src/packages/kokkos" kernels_src="$src/packages/kokkos-kernels"
  fi
  local build="$SRC_CACHE/build-$name"
  $SUDO rm -rf "$build" "$prefix.partial"
  say "building Kokkos ($name) into $prefix"
  $SUDO cmake -S "$kokkos_src" -B "$build/kokkos" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$prefix.partial" -DCMAKE_CXX_STANDARD=17 -DKokkos_ENABLE_SERIAL=ON \
      -DKokkos_ENABLE_OPENMP=ON -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON "$@" >"$build.kokkos.log" 2>&1 \
    || { tail -30 "$build.kokkos.log" >&2; die "Kokkos configure failed (log: $build.kokkos.log)"; }
  $SUDO cmake --build "$build/kokkos" -j "$JOBS" >>"$build.kokkos.log" 2>&1 && $SUDO cmake --install "$build/kokkos" >>"$build.kokkos.log" 2>&1 \
    || { tail -30 "$build.kokkos.log" >&2; die "Kokkos build failed (log: $build.kokkos.log)"; }
  KERNELS_SRC="$kernels_src" build_kernels "$prefix" "$name" "$@"
  printf '%s\n' "$*" | $SUDO tee "$prefix.partial/.dpk-options" >/dev/null
  $SUDO rm -rf "$prefix" && $SUDO mv "$prefix.partial" "$prefix"
  $SUDO rm -rf "$build"
  say "installed Kokkos ($name) in $prefix"
}

have_kokkos_in() {
  local d
  for d in "$@"; do
    [ -n "$d" ] || continue
    if ls "$d"/lib*/cmake/Kokkos/KokkosConfig.cmake >/dev/null 2>&1 && \
       ls "$d"/lib*/cmake/KokkosKernels/KokkosKernelsConfig.cmake >/dev/null 2>&1; then echo "$d"; return 0; fi
  done
  return 1
}

KK_EXTRA=()
prefix_path="${CMAKE_PREFIX_PATH:-}"
user_kokkos=$(have_kokkos_in "${Kokkos_ROOT:-}" ${prefix_path//:/ } || true)
if [ -n "$user_kokkos" ]; then
  say "using Kokkos + Kokkos Kernels from $user_kokkos (Kokkos_ROOT/CMAKE_PREFIX_PATH)"
elif have_kokkos_in "$KOKKOS_PREFIX" >/dev/null; then
  say "Kokkos (OpenMP) cached in $KOKKOS_PREFIX"
else
  build_kokkos "$KOKKOS_PREFIX" openmp
fi

# --------------------------------------------------------------------------- Kokkos 4.6 (--kokkos4)
# cached_kokkos PREFIX OPTIONS...: true when PREFIX holds a finished build made with OPTIONS.
cached_kokkos() {
  local prefix="$1"; shift
  have_kokkos_in "$prefix" >/dev/null && [ "$(cat "$prefix/.dpk-options" 2>/dev/null)" = "$*" ]
}
# ensure_kokkos4 PREFIX NAME WHAT OPTIONS...: Kokkos 4.6.01 + Kokkos Kernels 4.6.02 built with
# OPTIONS into PREFIX, unless PREFIX holds a build made with the same OPTIONS.
ensure_kokkos4() {
  local prefix="$1" name="$2" what="$3"; shift 3
  if cached_kokkos "$prefix" "$@"; then
    say "Kokkos $KOKKOS4_VERSION ($what) cached in $prefix"
  else
    fetch_kokkos4
    KOKKOS_SRC="$SRC_CACHE/kokkos-$KOKKOS4_VERSION" KERNELS_SRC="$SRC_CACHE/kokkos-kernels-$KOKKOS_KERNELS4_VERSION" \
      build_kokkos "$prefix" "$name" "$@"
  fi
}
if [ "$WANT_KOKKOS4" = 1 ]; then
  ensure_kokkos4 "$KOKKOS4_PREFIX" kokkos4-openmp "OpenMP" \
    -DKokkos_ENABLE_DEPRECATED_CODE_4=ON -DKokkos_ENABLE_DEPRECATION_WARNINGS=ON
  ensure_kokkos4 "$KOKKOS4_NODEP_PREFIX" kokkos4-openmp-nodeprecated "OpenMP, no deprecated code" \
    -DKokkos_ENABLE_DEPRECATED_CODE_4=OFF -DCMAKE_CXX_STANDARD=20  # Kokkos 5 needs C++20 too
fi
# Kokkos 4.6.01 without deprecated code, as C++20, built by clang 14 (--kokkos4-clang; CI's
# second stage): a build of dpk has to use the compiler and OpenMP runtime Kokkos was built
# with (preset openmp-kokkos4-clang).
if [ "$WANT_KOKKOS4_CLANG" = 1 ]; then
  command -v clang++-14 >/dev/null || die "clang++-14 not found (Debian package clang-14)"
  ensure_kokkos4 "$KOKKOS4_CLANG_PREFIX" kokkos4-openmp-clang "OpenMP, clang 14, no deprecated code, C++20" \
    -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 \
    -DKokkos_ENABLE_DEPRECATED_CODE_4=OFF -DCMAKE_CXX_STANDARD=20
fi

# --------------------------------------------------------------------------- CUDA 11.8 toolchain
# Debian's nvidia-cuda-toolkit (CUDA 11.8, non-free) with g++-11. Two things make it usable on
# machines that also carry a newer CUDA (e.g. the CUDA 13 of these machine images):
#  * $CUDA_TOOLCHAIN/include mirrors the Debian CUDA headers (symlinks). A newer CUDA often
#    links its headers into /usr/local/include, which g++ searches *before* /usr/include, so
#    CUDA 11.8's nvcc would otherwise preprocess CUDA 13's cuda_fp16.h (Kokkos_Cuda_Half.hpp
#    then fails). $CUDA_TOOLCHAIN/bin/nvcc calls Debian's nvcc with -isystem on that folder.
#    Likewise $CUDA_TOOLCHAIN/lib64 mirrors Debian's CUDA libraries, so that CMake's
#    FindCUDAToolkit (rooted at $CUDA_TOOLCHAIN via PATH) does not pick /usr/local/lib/libcudart.so
#    of the newer CUDA.
#  * nvcc_wrapper (Kokkos' compiler wrapper) defaults to `nvcc` from PATH, host compiler `g++`
#    and -arch=sm_35. The copy installed in the Kokkos prefix defaults instead to the nvcc
#    above, g++-11 and sm_80, so `cmake --build` works without any environment set
#    (NVCC_WRAPPER_DEFAULT_COMPILER and CUDA_ROOT still override, as upstream).
CUDA_TOOLCHAIN="$PREFIX_ROOT/cuda-11.8"
DEBIAN_NVCC=/usr/lib/nvidia-cuda-toolkit/bin/nvcc

setup_cuda_toolchain() {
  [ -x "$DEBIAN_NVCC" ] || die "$DEBIAN_NVCC missing after installing nvidia-cuda-toolkit"
  local version; version=$("$DEBIAN_NVCC" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
  case "$version" in 11.*) ;; *) die "Debian nvcc reports CUDA '$version'; Kokkos 3.4 needs CUDA 11 (nvidia-cuda-toolkit from bookworm non-free)" ;; esac
  command -v g++-11 >/dev/null || die "g++-11 missing (CUDA 11.8 supports g++ <= 11)"
  local stamp="$CUDA_TOOLCHAIN/.stamp" want
  want="nvcc $version; $(dpkg-query -W -f='${Version}' nvidia-cuda-dev libcub-dev libthrust-dev 2>/dev/null | tr '\n' ' '); layout 3"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return; fi
  say "preparing CUDA $version toolchain shim in $CUDA_TOOLCHAIN"
  $SUDO rm -rf "$CUDA_TOOLCHAIN" && $SUDO mkdir -p "$CUDA_TOOLCHAIN/include" "$CUDA_TOOLCHAIN/bin"
  local name
  for name in $(dpkg -L nvidia-cuda-dev libcub-dev libthrust-dev 2>/dev/null | sed -n 's|^/usr/include/\([^/]*\).*|\1|p' | sort -u); do
    [ -e "/usr/include/$name" ] && $SUDO ln -s "/usr/include/$name" "$CUDA_TOOLCHAIN/include/$name"
  done
  $SUDO mkdir -p "$CUDA_TOOLCHAIN/lib64"
  for name in $(dpkg -L nvidia-cuda-dev | sed -n 's|^/usr/lib/x86_64-linux-gnu/\([^/]*\)$|\1|p'); do
    [ -e "/usr/lib/x86_64-linux-gnu/$name" ] && $SUDO ln -s "/usr/lib/x86_64-linux-gnu/$name" "$CUDA_TOOLCHAIN/lib64/$name"
  done
  [ -e /usr/lib/x86_64-linux-gnu/stubs/libcuda.so ] && $SUDO ln -sf /usr/lib/x86_64-linux-gnu/stubs/libcuda.so "$CUDA_TOOLCHAIN/lib64/libcuda.so"
  [ -e "$CUDA_TOOLCHAIN/lib64/libcudart.so" ] && [ -e "$CUDA_TOOLCHAIN/lib64/libcudart_static.a" ] \
    || die "Debian's libcudart.so / libcudart_static.a not found (package nvidia-cuda-dev)"
  # The machine image puts CUDA 13's cudafe++/ptxas/fatbinary/nvlink (/usr/local/cuda/bin,
  # /usr/local/bin) ahead of Debian's (/usr/bin) on PATH; nvcc 11.8 driving CUDA 13's cudafe++
  # writes host stubs that do not compile (__nv_hdl_wrapper_t mismatch on every KOKKOS_LAMBDA).
  printf '#!/bin/sh\n# CUDA %s nvcc (Debian), its own headers ahead of any other CUDA in /usr/local/include,\n# its own tools (/usr/bin: cudafe++, ptxas, fatbinary, nvlink) ahead of any other CUDA on PATH.\nPATH=%s:/usr/bin:$PATH\nexport PATH\nexec %s -isystem %s "$@"\n' \
    "$version" "$(dirname "$DEBIAN_NVCC")" "$DEBIAN_NVCC" "$CUDA_TOOLCHAIN/include" | $SUDO tee "$CUDA_TOOLCHAIN/bin/nvcc" >/dev/null
  $SUDO chmod 755 "$CUDA_TOOLCHAIN/bin/nvcc"
  # Kokkos' nvcc_wrapper with dpk's defaults (see above).
  sed -e 's|^default_arch="sm_35"|default_arch="${NVCC_WRAPPER_DEFAULT_ARCH:-sm_80}"|' \
      -e 's|^host_compiler=${NVCC_WRAPPER_DEFAULT_COMPILER:-"g++"}|host_compiler=${NVCC_WRAPPER_DEFAULT_COMPILER:-"g++-11"}|' \
      -e "s|^nvcc_compiler=nvcc\$|nvcc_compiler=$CUDA_TOOLCHAIN/bin/nvcc|" \
      "$(fetch_trilinos)/packages/kokkos/bin/nvcc_wrapper" | $SUDO tee "$CUDA_TOOLCHAIN/bin/nvcc_wrapper" >/dev/null
  $SUDO chmod 755 "$CUDA_TOOLCHAIN/bin/nvcc_wrapper"
  for name in 'default_arch="${NVCC_WRAPPER_DEFAULT_ARCH:-sm_80}"' '"g++-11"}' "nvcc_compiler=$CUDA_TOOLCHAIN/bin/nvcc"; do
    grep -qF "$name" "$CUDA_TOOLCHAIN/bin/nvcc_wrapper" || die "could not patch nvcc_wrapper defaults ($name)"
  done
  echo "$want" | $SUDO tee "$stamp" >/dev/null
}

if [ "$WANT_CUDA" = 1 ]; then
  apt_install nvidia-cuda-toolkit nvidia-cuda-dev g++-11
  setup_cuda_toolchain
  # Debian's CUDA first on PATH: CMake's FindCUDAToolkit (used by Kokkos) must see CUDA 11.8.
  export PATH="$CUDA_TOOLCHAIN/bin:/usr/bin:$PATH"
  if [ "$WANT_CUDA34" = 0 ]; then
    :  # only the Kokkos 4 Hopper bundle was asked for
  elif have_kokkos_in "$KOKKOS_CUDA_PREFIX" >/dev/null && cmp -s "$CUDA_TOOLCHAIN/.stamp" "$KOKKOS_CUDA_PREFIX/.dpk-toolchain" \
     && cmp -s "$CUDA_TOOLCHAIN/bin/nvcc_wrapper" "$KOKKOS_CUDA_PREFIX/bin/nvcc_wrapper"; then
    say "Kokkos (CUDA) cached in $KOKKOS_CUDA_PREFIX"
  else
    KK_EXTRA=(-DKokkosKernels_ENABLE_TPL_CUBLAS=ON)
    build_kokkos "$KOKKOS_CUDA_PREFIX" cuda -DCMAKE_CXX_COMPILER="$CUDA_TOOLCHAIN/bin/nvcc_wrapper" \
      -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON -DKokkos_ARCH_AMPERE80=ON
    KK_EXTRA=()
    $SUDO cp "$CUDA_TOOLCHAIN/bin/nvcc_wrapper" "$KOKKOS_CUDA_PREFIX/bin/nvcc_wrapper"
    $SUDO cp "$CUDA_TOOLCHAIN/.stamp" "$KOKKOS_CUDA_PREFIX/.dpk-toolchain"
  fi
  if [ "$WANT_BUNDLE" = 1 ]; then
    if have_kokkos_in "$KOKKOS_BUNDLE_PREFIX" >/dev/null && cmp -s "$CUDA_TOOLCHAIN/.stamp" "$KOKKOS_BUNDLE_PREFIX/.dpk-toolchain" \
       && cmp -s "$CUDA_TOOLCHAIN/bin/nvcc_wrapper" "$KOKKOS_BUNDLE_PREFIX/bin/nvcc_wrapper"; then
      say "Kokkos (CUDA bundle) cached in $KOKKOS_BUNDLE_PREFIX"
    else
      # Shippable: no OpenMP (no libgomp), static libcudart, Kokkos Kernels' own GEMM kernels
      # (CUDA 11's cuBLAS is hundreds of MB), no host BLAS.
      KK_EXTRA=(-DKokkosKernels_ENABLE_TPL_BLAS=OFF -DKokkosKernels_ENABLE_TPL_CUBLAS=OFF
                -DKokkosKernels_ENABLE_TPL_CUSPARSE=OFF)
      build_kokkos "$KOKKOS_BUNDLE_PREFIX" cuda-bundle -DCMAKE_CXX_COMPILER="$CUDA_TOOLCHAIN/bin/nvcc_wrapper" \
        -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON -DKokkos_ARCH_AMPERE80=ON -DKokkos_ENABLE_OPENMP=OFF \
        -DCUDA_cudart_LIBRARY="$CUDA_TOOLCHAIN/lib64/libcudart_static.a"
      KK_EXTRA=()
      $SUDO cp "$CUDA_TOOLCHAIN/bin/nvcc_wrapper" "$KOKKOS_BUNDLE_PREFIX/bin/nvcc_wrapper"
      $SUDO cp "$CUDA_TOOLCHAIN/.stamp" "$KOKKOS_BUNDLE_PREFIX/.dpk-toolchain"
    fi
  fi
  if [ "$WANT_BUNDLE_HOPPER" = 1 ]; then
    # The bundle's Kokkos (CUDA + Serial, static cudart, native Kokkos Kernels GEMM) from the
    # Kokkos 4.6 sources, for Hopper (sm_90, which CUDA 11.8 knows): native code on H100/H200
    # instead of sm_80 PTX JIT-compiled by the driver. Its own nvcc_wrapper (Kokkos 4.6's, with
    # the same defaults as above but sm_90).
    fetch_kokkos4
    HOPPER_OPTS=(-DCMAKE_CXX_COMPILER="$KOKKOS4_BUNDLE_HOPPER_PREFIX.wrapper/nvcc_wrapper" -DKokkos_ENABLE_CUDA=ON
                 -DKokkos_ARCH_HOPPER90=ON -DKokkos_ENABLE_OPENMP=OFF -DKokkos_ENABLE_DEPRECATED_CODE_4=OFF
                 -DCUDA_cudart_LIBRARY="$CUDA_TOOLCHAIN/lib64/libcudart_static.a")
    $SUDO mkdir -p "$KOKKOS4_BUNDLE_HOPPER_PREFIX.wrapper"
    sed -e 's|^default_arch="sm_[0-9]*"|default_arch="${NVCC_WRAPPER_DEFAULT_ARCH:-sm_90}"|' \
        -e 's|^host_compiler=${NVCC_WRAPPER_DEFAULT_COMPILER:-"g++"}|host_compiler=${NVCC_WRAPPER_DEFAULT_COMPILER:-"g++-11"}|' \
        -e "s|^nvcc_compiler=nvcc\$|nvcc_compiler=$CUDA_TOOLCHAIN/bin/nvcc|" \
        "$SRC_CACHE/kokkos-$KOKKOS4_VERSION/bin/nvcc_wrapper" | $SUDO tee "$KOKKOS4_BUNDLE_HOPPER_PREFIX.wrapper/nvcc_wrapper" >/dev/null
    $SUDO chmod 755 "$KOKKOS4_BUNDLE_HOPPER_PREFIX.wrapper/nvcc_wrapper"
    for name in 'sm_90}"' '"g++-11"}' "nvcc_compiler=$CUDA_TOOLCHAIN/bin/nvcc"; do
      grep -qF "$name" "$KOKKOS4_BUNDLE_HOPPER_PREFIX.wrapper/nvcc_wrapper" || die "could not patch Kokkos 4 nvcc_wrapper defaults ($name)"
    done
    if cached_kokkos "$KOKKOS4_BUNDLE_HOPPER_PREFIX" "${HOPPER_OPTS[@]}" && cmp -s "$CUDA_TOOLCHAIN/.stamp" "$KOKKOS4_BUNDLE_HOPPER_PREFIX/.dpk-toolchain" \
       && cmp -s "$KOKKOS4_BUNDLE_HOPPER_PREFIX.wrapper/nvcc_wrapper" "$KOKKOS4_BUNDLE_HOPPER_PREFIX/bin/nvcc_wrapper"; then
      say "Kokkos $KOKKOS4_VERSION (CUDA bundle, Hopper) cached in $KOKKOS4_BUNDLE_HOPPER_PREFIX"
    else
      KK_EXTRA=(-DKokkosKernels_ENABLE_TPL_BLAS=OFF -DKokkosKernels_ENABLE_TPL_CUBLAS=OFF
                -DKokkosKernels_ENABLE_TPL_CUSPARSE=OFF -DKokkosKernels_ENABLE_TPL_CUSOLVER=OFF)
      KOKKOS_SRC="$SRC_CACHE/kokkos-$KOKKOS4_VERSION" KERNELS_SRC="$SRC_CACHE/kokkos-kernels-$KOKKOS_KERNELS4_VERSION" \
        build_kokkos "$KOKKOS4_BUNDLE_HOPPER_PREFIX" kokkos4-cuda-bundle-hopper "${HOPPER_OPTS[@]}"
      KK_EXTRA=()
      $SUDO mkdir -p "$KOKKOS4_BUNDLE_HOPPER_PREFIX/bin"
      $SUDO cp "$KOKKOS4_BUNDLE_HOPPER_PREFIX.wrapper/nvcc_wrapper" "$KOKKOS4_BUNDLE_HOPPER_PREFIX/bin/nvcc_wrapper"
      $SUDO cp "$CUDA_TOOLCHAIN/.stamp" "$KOKKOS4_BUNDLE_HOPPER_PREFIX/.dpk-toolchain"
    fi
  fi
  if [ "$WANT_BUNDLE_CUBLAS" = 1 ]; then
    # cuBLAS for the Hopper bundle without shipping it (libcublasLt.so.13 alone is 550 MB): Kokkos
    # Kernels compiled against CUDA 11.8's cublas_v2.h and linked to libcublas.so.13, which a GPU
    # host with CUDA 13 (or PyTorch's nvidia-cublas package) provides at run time. libcublas.so.13
    # needs no libcudart, and the few functions Kokkos Kernels calls (cublasCreate/Destroy/
    # SetStream_v2, D/S gemm_v2, D/S gemv_v2) keep their CUDA 11 signatures. The wheel is only
    # unpacked here for the linker. Kokkos itself is the Hopper bundle's, copied.
    if [ ! -f "$CUBLAS13_DIR/lib/libcublas.so.13" ] || [ ! -f "$CUBLAS13_DIR/lib/libcublasLt.so.13" ]; then
      say "fetching $CUBLAS13_WHEEL (PyPI, ~450 MB) for libcublas.so.13"
      wheel_dir=$(mktemp -d)
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d "$wheel_dir" "$CUBLAS13_WHEEL" || die "pip download $CUBLAS13_WHEEL failed"
      $SUDO rm -rf "$CUBLAS13_DIR.partial" && $SUDO mkdir -p "$CUBLAS13_DIR.partial/lib"
      $SUDO python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    if n.endswith((".so.13",)) and "/lib/libcublas" in n:
        open(sys.argv[2] + "/" + n.rsplit("/", 1)[1], "wb").write(z.read(n))' "$(ls "$wheel_dir"/nvidia_cublas-*.whl)" "$CUBLAS13_DIR.partial/lib"
      $SUDO ln -sf libcublas.so.13 "$CUBLAS13_DIR.partial/lib/libcublas.so"
      rm -rf "$wheel_dir"
      [ -f "$CUBLAS13_DIR.partial/lib/libcublasLt.so.13" ] || die "no libcublasLt.so.13 in $CUBLAS13_WHEEL"
      $SUDO rm -rf "$CUBLAS13_DIR" && $SUDO mv "$CUBLAS13_DIR.partial" "$CUBLAS13_DIR"
    fi
    CUBLAS_OPTS=(-DKokkosKernels_ENABLE_TPL_BLAS=OFF -DKokkosKernels_ENABLE_TPL_CUBLAS=ON
                 -DKokkosKernels_ENABLE_TPL_CUSPARSE=OFF -DKokkosKernels_ENABLE_TPL_CUSOLVER=OFF
                 -DCUBLAS_LIBRARIES=cublas -DCUBLAS_LIBRARY_DIRS="$CUBLAS13_DIR/lib"
                 -DCUBLAS_INCLUDE_DIRS="$CUDA_TOOLCHAIN/include")
    if have_kokkos_in "$KOKKOS4_BUNDLE_CUBLAS_PREFIX" >/dev/null \
       && [ "$(cat "$KOKKOS4_BUNDLE_CUBLAS_PREFIX/.dpk-options" 2>/dev/null)" = "${HOPPER_OPTS[*]} ${CUBLAS_OPTS[*]}" ] \
       && cmp -s "$KOKKOS4_BUNDLE_HOPPER_PREFIX/.dpk-toolchain" "$KOKKOS4_BUNDLE_CUBLAS_PREFIX/.dpk-toolchain"; then
      say "Kokkos $KOKKOS4_VERSION (CUDA bundle, Hopper, cuBLAS 13) cached in $KOKKOS4_BUNDLE_CUBLAS_PREFIX"
    else
      say "building Kokkos Kernels with cuBLAS 13 into $KOKKOS4_BUNDLE_CUBLAS_PREFIX"
      build="$SRC_CACHE/build-kokkos4-cuda-bundle-hopper-cublas"
      $SUDO rm -rf "$build" "$KOKKOS4_BUNDLE_CUBLAS_PREFIX.partial"
      $SUDO cp -a "$KOKKOS4_BUNDLE_HOPPER_PREFIX" "$KOKKOS4_BUNDLE_CUBLAS_PREFIX.partial"
      KERNELS_SRC="$SRC_CACHE/kokkos-kernels-$KOKKOS_KERNELS4_VERSION" build_kernels "$KOKKOS4_BUNDLE_CUBLAS_PREFIX" \
        kokkos4-cuda-bundle-hopper-cublas -DCUDAToolkit_ROOT="$CUDA_TOOLCHAIN" "${HOPPER_OPTS[@]}" "${CUBLAS_OPTS[@]}"
      grep -q '^#define KOKKOSKERNELS_ENABLE_TPL_CUBLAS' "$KOKKOS4_BUNDLE_CUBLAS_PREFIX.partial/include/KokkosKernels_config.h" \
        || die "Kokkos Kernels in $KOKKOS4_BUNDLE_CUBLAS_PREFIX.partial has no cuBLAS"
      printf '%s\n' "${HOPPER_OPTS[*]} ${CUBLAS_OPTS[*]}" | $SUDO tee "$KOKKOS4_BUNDLE_CUBLAS_PREFIX.partial/.dpk-options" >/dev/null
      $SUDO rm -rf "$KOKKOS4_BUNDLE_CUBLAS_PREFIX" && $SUDO mv "$KOKKOS4_BUNDLE_CUBLAS_PREFIX.partial" "$KOKKOS4_BUNDLE_CUBLAS_PREFIX"
      $SUDO rm -rf "$build"
      say "installed Kokkos Kernels (cuBLAS 13) in $KOKKOS4_BUNDLE_CUBLAS_PREFIX"
    fi
  fi
  say "CUDA: configure with: cmake --preset cuda   (compiler $KOKKOS_CUDA_PREFIX/bin/nvcc_wrapper)"
fi

say "done. Configure with: cmake --preset openmp   (or -DKokkos_ROOT=$KOKKOS_PREFIX)"

#!/usr/bin/env bash
# One GPU check of the bundle on a borrowed GPU machine that receives a copy of this tree (the
# device tool of our workplace: the tree plus at most 64 MiB travels, results come back from $OUT).
#
#   scripts/gpu_bundle.sh && scripts/gpu_remote_check.sh pack [--deepmd-pt]     # here
#   scripts/gpu_remote_check.sh run                                             # there, in the tree
#
# pack  writes .gpu/bundle.tar.xz: the built bundle without its copy of tests/data and
#       examples/water (the tree that travels has them), xz-compressed (~15 MB; gzip: ~30). With
#       --deepmd-pt also .gpu/whl: DeePMD-kit 3.2.0 and the packages its PyTorch backend imports
#       that the GPU machine's Python 3.12 image lacks (pip download, ~30 MB), for a side-by-side
#       training there.
#       A built hopper90-cublas bundle (gpu_bundle.sh with DPK_BUNDLE_ARCH=hopper90-cublas) goes
#       into .gpu/bundle-cublas.tar.xz beside it (DPK_PACK_CUBLAS=0 leaves it out).
#       .gpu/ is kept out of git (.git/info/exclude); name it in the device tool's `carry`.
# run   unpacks it under /tmp, links the tree's data into it, runs run.sh's tests, training and
#       kernel times (RUN_LIMIT s, default 240), DeePMD-kit's PyTorch backend on the same water
#       training if .gpu/whl exists and PT="N1 N2" is set (wall per step from the two step counts,
#       PT_LIMIT s, default 150), then the benchmarks (BENCH_LIMIT s, default 0 = skip), and packs
#       results into $OUT (or RESULTS_DIR): run.log, pt.log, bench.log, results.tar.gz. Then,
#       when .gpu/bundle-cublas.tar.xz came along and CUBLAS_LIMIT (s) is set, the cuBLAS bundle's
#       run.sh with CUBLAS_PARTS (default "tests train kernels bench"): run-cublas.log,
#       results-cublas.tar.gz.
#       run.sh's own variables (DPK_JOBS, DPK_TEST_TIMEOUT, DPK_BENCH_PROGRAMS, ...) pass through;
#       STEPS (default 300) is the training length.
# pt [N1 N2]  the DeePMD-kit part alone (needs .gpu/whl and a Python 3.12 with torch).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
say() { printf '[gpu_remote_check] %s\n' "$*"; }
die() { printf '[gpu_remote_check] error: %s\n' "$*" >&2; exit 1; }

# pack_stage STAGE TARBALL: a built bundle without its copies of tests/data and examples/water.
pack_stage() {
  tar -cJf "$2" -C "$1" --exclude=dpk-gpu-bundle/tests --exclude=dpk-gpu-bundle/examples dpk-gpu-bundle
  say "$2: $(du -h "$2" | cut -f1)"
}

pack() {
  local stage="${DPK_BUNDLE_BUILD_DIR:-build/gpu-bundle-${DPK_BUNDLE_ARCH:-hopper90}}/stage"
  [ -x "$stage/dpk-gpu-bundle/run.sh" ] || die "no bundle in $stage (run scripts/gpu_bundle.sh first)"
  mkdir -p .gpu .git/info
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
  rm -f .gpu/bundle.tar.gz
  pack_stage "$stage" .gpu/bundle.tar.xz
  local cublas_stage=build/gpu-bundle-hopper90-cublas/stage
  rm -f .gpu/bundle-cublas.tar.xz
  if [ "${DPK_PACK_CUBLAS:-1}" = 1 ] && [ -x "$cublas_stage/dpk-gpu-bundle/run.sh" ] && [ "$stage" != "$cublas_stage" ]; then
    pack_stage "$cublas_stage" .gpu/bundle-cublas.tar.xz
  fi
  if [ "${1:-}" = --deepmd-pt ]; then
    mkdir -p .gpu/whl
    # What `dp --pt train` imports beyond the image's packages (tried with `pt` below in a
    # Python 3.12 venv holding only what the image has: numpy scipy h5py pyyaml einops ml_dtypes
    # msgpack pandas torch e3nn): dargs, typeguard, wcmatch, bracex, array_api_compat, lmdb;
    # mpich, whose library deepmd.pt loads at import (cxx_op.py); mendeleev, imported for the
    # data statistics, with SQLAlchemy, Deprecated, Pint (flexcache, flexparser, platformdirs),
    # pydantic (pydantic-core, annotated-types, typing-inspection) and pyfiglet.
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d .gpu/whl deepmd-kit==3.2.0 dargs==0.5.1 typeguard==4.6.1 \
      wcmatch==12.0.3 bracex==3.2.3 array-api-compat==1.16.0 lmdb==1.7.5 mpich==5.0.2 mendeleev==1.3.0 \
      sqlalchemy==2.1.9 deprecated==1.3.1 pint==0.24.4 flexcache==0.3 flexparser==0.4 platformdirs==4.14.9 \
      pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 pyfiglet==0.8.post1 \
      || die "pip download failed"
    say ".gpu/whl: $(du -sh .gpu/whl | cut -f1)"
  fi
  say "travels: $(du -sh .gpu | cut -f1) in .gpu + the tree (limit 64 MiB together)"
}

# DeePMD-kit's PyTorch backend, water example, float64: wall seconds for N1 and N2 steps.
deepmd_pt() {
  local n1=$1 n2=$2 n d s e
  # --prefix, not --target: mpich's wheel puts libmpi in <prefix>/lib, where deepmd.pt looks for
  # it through the package's file list (with --target it is lost and `import deepmd.pt` fails).
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --prefix /tmp/dpk-prefix .gpu/whl/*.whl \
    || { echo "FAIL  pip install of .gpu/whl"; return 1; }
  PYTHONPATH=$(python3 -c "import sysconfig; print(sysconfig.get_path('purelib', vars={'base': '/tmp/dpk-prefix'}))")
  export PYTHONPATH
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
  for n in "$n1" "$n2"; do
    d=/tmp/dpk-pt-$n; rm -rf "$d"; mkdir -p "$d"
    python3 "$root/benchmarks/water_input.py" "$root/examples/water/se_e2_a/input.json" "$root/examples/water/data" "$n" "$d/input.json"
    s=$(date +%s.%N)
    (cd "$d" && python3 -m deepmd --pt train input.json >log.txt 2>&1) || { echo "FAIL  dp --pt train, $n steps"; tail -n 15 "$d/log.txt"; return 1; }
    e=$(date +%s.%N)
    printf -v "wall_$n" '%s' "$(python3 -c "print($e - $s)")"
    echo "PASS  dp --pt train, float64, $n steps: $(python3 -c "print(f'{$e - $s:.2f}')") s wall"
  done
  local a="wall_$n1" b="wall_$n2"
  echo "DeePMD-kit PyTorch on the GPU: $(python3 -c "print(f'{(${!b} - ${!a}) / ($n2 - $n1) * 1e3:.2f}')") ms/step (float64, from $n1 and $n2 steps)"
  grep -h -i -m2 'device\|cuda' /tmp/dpk-pt-"$n2"/log.txt
}

# unpack_bundle TARBALL DIR: the bundle in DIR/dpk-gpu-bundle with the tree's data linked in.
unpack_bundle() {
  rm -rf "$2" && mkdir -p "$2" && tar -xJf "$1" -C "$2" || die "cannot unpack $1"
  mkdir -p "$2/dpk-gpu-bundle/tests" "$2/dpk-gpu-bundle/examples"
  ln -sfn "$root/tests/data" "$2/dpk-gpu-bundle/tests/data"
  ln -sfn "$root/examples/water" "$2/dpk-gpu-bundle/examples/water"
}

run() {
  local out="${RESULTS_DIR:-${OUT:-$root/results-gpu}}" b=/tmp/dpk-bundle c=/tmp/dpk-bundle-cublas
  mkdir -p "$out"
  [ -f .gpu/bundle.tar.xz ] || die ".gpu/bundle.tar.xz missing (pack it here first, carry .gpu)"
  echo "== host: $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), glibc $(ldd --version | head -n1 | awk '{print $NF}')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  unpack_bundle .gpu/bundle.tar.xz "$b"
  cd "$b/dpk-gpu-bundle" || exit 1
  local f
  for f in bin/*; do ldd "$f" | grep -q 'not found' && { echo "missing libraries: $f"; ldd "$f" | grep 'not found'; }; done
  DPK_PARTS="${PARTS:-tests train kernels}" timeout "${RUN_LIMIT:-240}" ./run.sh 0 "${STEPS:-300}" 2>&1 | tee "$out/run.log"
  echo "run.sh exit status: ${PIPESTATUS[0]}" | tee -a "$out/run.log"
  if [ -n "${PT:-}" ] && [ -d "$root/.gpu/whl" ]; then
    (cd "$root" && export -f deepmd_pt && export root && timeout "${PT_LIMIT:-150}" bash -c "deepmd_pt $PT") 2>&1 | tee "$out/pt.log"
  fi
  if [ "${BENCH_LIMIT:-0}" != 0 ]; then
    DPK_PARTS=bench timeout "$BENCH_LIMIT" ./run.sh 2>&1 | tee "$out/bench.log"
  fi
  tar -czf "$out/results.tar.gz" --exclude='*.ckpt*' --exclude='*.dpk' --exclude=checkpoint results
  if [ -f "$root/.gpu/bundle-cublas.tar.xz" ] && [ "${CUBLAS_LIMIT:-0}" != 0 ]; then
    unpack_bundle "$root/.gpu/bundle-cublas.tar.xz" "$c"
    (cd "$c/dpk-gpu-bundle" && DPK_PARTS="${CUBLAS_PARTS:-tests train kernels bench}" timeout "$CUBLAS_LIMIT" ./run.sh 0 "${STEPS:-300}" 2>&1;
     echo "run.sh (cuBLAS bundle) exit status: $?") | tee "$out/run-cublas.log"
    tar -czf "$out/results-cublas.tar.gz" -C "$c/dpk-gpu-bundle" --exclude='*.ckpt*' --exclude='*.dpk' --exclude=checkpoint results
  fi
  nvidia-smi --query-gpu=temperature.gpu,power.draw,clocks.sm --format=csv
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) run ;;
  pt) shift; deepmd_pt "${1:-20}" "${2:-120}" ;;   # the DeePMD-kit part alone
  *) sed -n '2,26p' "$0"; exit 2 ;;
esac

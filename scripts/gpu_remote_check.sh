#!/usr/bin/env bash
# One GPU check of the bundle on a borrowed GPU machine that receives a copy of this tree (the
# device tool of our workplace: the tree plus at most 64 MiB travels, results come back from $OUT).
#
#   scripts/gpu_bundle.sh && scripts/gpu_remote_check.sh pack [--deepmd-pt]     # here
#   scripts/gpu_remote_check.sh run                                             # there, in the tree
#
# pack  writes .gpu/bundle.tar.gz: the built bundle without its copy of tests/data and
#       examples/water (the tree that travels has them; ~30 MB instead of ~40). With --deepmd-pt
#       also .gpu/whl: DeePMD-kit 3.2.0 and the packages its PyTorch backend imports that the GPU
#       machine's Python 3.12 image lacks (pip download, ~11 MB), for a side-by-side training there.
#       .gpu/ is kept out of git (.git/info/exclude); name it in the device tool's `carry`.
# run   unpacks it under /tmp, links the tree's data into it, runs run.sh's tests, training and
#       kernel times (RUN_LIMIT s, default 240), DeePMD-kit's PyTorch backend on the same water
#       training if .gpu/whl exists and PT="N1 N2" is set (wall per step from the two step counts,
#       PT_LIMIT s, default 150), then the benchmarks (BENCH_LIMIT s, default 0 = skip), and packs
#       results into $OUT (or RESULTS_DIR): run.log, pt.log, bench.log, results.tar.gz.
#       run.sh's own variables (DPK_JOBS, DPK_TEST_TIMEOUT, DPK_BENCH_PROGRAMS, ...) pass through;
#       STEPS (default 300) is the training length.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
say() { printf '[gpu_remote_check] %s\n' "$*"; }
die() { printf '[gpu_remote_check] error: %s\n' "$*" >&2; exit 1; }

pack() {
  local stage="${DPK_BUNDLE_BUILD_DIR:-build/gpu-bundle-${DPK_BUNDLE_ARCH:-hopper90}}/stage"
  [ -x "$stage/dpk-gpu-bundle/run.sh" ] || die "no bundle in $stage (run scripts/gpu_bundle.sh first)"
  mkdir -p .gpu .git/info
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
  tar -czf .gpu/bundle.tar.gz -C "$stage" --exclude=dpk-gpu-bundle/tests --exclude=dpk-gpu-bundle/examples dpk-gpu-bundle
  say ".gpu/bundle.tar.gz: $(du -h .gpu/bundle.tar.gz | cut -f1)"
  if [ "${1:-}" = --deepmd-pt ]; then
    mkdir -p .gpu/whl
    # What `dp --pt train` imports beyond the image's packages (checked with sys.modules after
    # importing deepmd.pt.train.training in a full venv): dargs, typeguard, wcmatch, bracex,
    # array_api_compat, lmdb. Python 3.12, manylinux x86_64.
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d .gpu/whl deepmd-kit==3.2.0 dargs==0.5.1 typeguard==4.6.1 \
      wcmatch==12.0.3 bracex==3.2.3 array-api-compat==1.16.0 lmdb==1.7.5 || die "pip download failed"
    say ".gpu/whl: $(du -sh .gpu/whl | cut -f1)"
  fi
  say "travels: $(du -sh .gpu | cut -f1) in .gpu + the tree (limit 64 MiB together)"
}

# DeePMD-kit's PyTorch backend, water example, float64: wall seconds for N1 and N2 steps.
deepmd_pt() {
  local n1=$1 n2=$2 n d s e
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/dpk-site .gpu/whl/*.whl \
    || { echo "FAIL  pip install of .gpu/whl"; return 1; }
  export PYTHONPATH=/tmp/dpk-site
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
  for n in "$n1" "$n2"; do
    d=/tmp/dpk-pt-$n; rm -rf "$d"; mkdir -p "$d"
    python3 - "$root/examples/water/se_e2_a/input.json" "$root/examples/water/data" "$n" "$d/input.json" <<'PY'
import json, sys
src, data, steps, dst = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
j = json.load(open(src))
t = j["training"]
t["training_data"]["systems"] = [data + "/data_%d" % i for i in range(3)]
if "validation_data" in t:
    t["validation_data"]["systems"] = [data + "/data_3"]
t["numb_steps"] = steps; t["disp_freq"] = steps; t["save_freq"] = steps
json.dump(j, open(dst, "w"), indent=1)
PY
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

run() {
  local out="${RESULTS_DIR:-${OUT:-$root/results-gpu}}" b=/tmp/dpk-bundle
  mkdir -p "$out"
  [ -f .gpu/bundle.tar.gz ] || die ".gpu/bundle.tar.gz missing (pack it here first, carry .gpu)"
  echo "== host: $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), glibc $(ldd --version | head -n1 | awk '{print $NF}')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  rm -rf "$b" && mkdir -p "$b" && tar -xzf .gpu/bundle.tar.gz -C "$b" || die "cannot unpack the bundle"
  cd "$b/dpk-gpu-bundle" || exit 1
  mkdir -p tests examples
  ln -sfn "$root/tests/data" tests/data
  ln -sfn "$root/examples/water" examples/water
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
  nvidia-smi --query-gpu=temperature.gpu,power.draw,clocks.sm --format=csv
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) run ;;
  *) sed -n '2,21p' "$0"; exit 2 ;;
esac

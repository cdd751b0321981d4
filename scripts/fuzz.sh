#!/usr/bin/env bash
# Builds dpk's libFuzzer targets (tests/fuzz, clang++ with ASan + UBSan) and runs each for a
# given time (docs/reliability.md).
#
#   scripts/fuzz.sh [seconds per target] [target...]     default 60 s, all targets
#
# Targets: fuzz_npy (npy reader), fuzz_input (input.json -> InputConfig), fuzz_model_file (model
# and checkpoint reader), fuzz_deepmd_yaml (DeePMD-kit .yaml model text -> DeepmdDict),
# fuzz_deepmd_hdf5 (a DeePMD-kit .dp file described by the input, written by HDF5 into memory ->
# DeepmdDict), fuzz_deepmd_model (DeepmdDict as JSON text -> dpk model, and an accepted model's
# export -> import round trip). Seeds:
# the real files of examples/ and tests/data (gathered here, small ones only) plus
# tests/fuzz/seeds/<target>. Runs use -seed=1 and start from an empty working
# corpus (build/fuzz/corpus/<target>; DPK_FUZZ_KEEP_CORPUS=1 keeps it between runs). Crash,
# timeout, leak and out-of-memory inputs go to build/fuzz/artifacts/<target>/; logs to
# build/fuzz/logs/<target>.log. Prints one line per target,
#   <target>: N execs, cov X, ft Y, <result> (T s run, E exec/s)
# and exits 1 when any target reported a problem (2 on a build or usage error). Targets run
# DPK_FUZZ_JOBS at a time (default: the number of CPUs).
# Needs clang++ (Debian: clang-14) and libFuzzer (libfuzzer-14-dev, libclang-rt-14-dev),
# installed by scripts/bootstrap.sh; HDF5 (libhdf5-dev) and, for fuzz_deepmd_model, Kokkos' headers
# (DPK_FUZZ_KOKKOS, default /opt/dpk-deps/kokkos-openmp).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/ccache_env.sh
source "$ROOT/scripts/ccache_env.sh"  # compile through ccache when installed (DPK_CCACHE=0: not)
BUILD="${DPK_FUZZ_BUILD_DIR:-$ROOT/build/fuzz}"
SECONDS_PER_TARGET="${1:-60}"
shift || true
ALL_TARGETS=(fuzz_npy fuzz_input fuzz_model_file fuzz_deepmd_yaml fuzz_deepmd_hdf5 fuzz_deepmd_model)
TARGETS=("$@")
[ "${#TARGETS[@]}" -gt 0 ] || TARGETS=("${ALL_TARGETS[@]}")
case "$SECONDS_PER_TARGET" in ''|*[!0-9]*) echo "fuzz.sh: seconds per target must be a positive integer, got '$SECONDS_PER_TARGET'" >&2; exit 2 ;; esac
for t in "${TARGETS[@]}"; do
  case " ${ALL_TARGETS[*]} " in *" $t "*) ;; *) echo "fuzz.sh: unknown target '$t' (expected one of: ${ALL_TARGETS[*]})" >&2; exit 2 ;; esac
done

CXX_FUZZ="${DPK_FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}"
[ -n "$CXX_FUZZ" ] || { echo "fuzz.sh: clang++ not found (scripts/bootstrap.sh installs clang-14 with libfuzzer-14-dev)" >&2; exit 2; }

# ---------------------------------------------------------------------------- build
mkdir -p "$BUILD"
echo "[fuzz] building ${TARGETS[*]} with $CXX_FUZZ in $BUILD"
if ! { cmake -S "$ROOT/tests/fuzz" -B "$BUILD" -DCMAKE_CXX_COMPILER="$CXX_FUZZ" \
         -DCMAKE_C_COMPILER="${DPK_FUZZ_CC:-$(command -v clang-14 || command -v clang || echo cc)}" \
         -DCMAKE_PREFIX_PATH="${DPK_FUZZ_KOKKOS:-/opt/dpk-deps/kokkos-openmp}" >"$BUILD.configure.log" 2>&1 &&
       cmake --build "$BUILD" -j "${DPK_BUILD_JOBS:-2}" --target "${TARGETS[@]}" >"$BUILD.build.log" 2>&1; }; then
  tail -30 "$BUILD.configure.log" "$BUILD.build.log" >&2 2>/dev/null || true
  echo "fuzz.sh: build failed (logs: $BUILD.configure.log, $BUILD.build.log)" >&2
  exit 2
fi

# ---------------------------------------------------------------------------- seeds
# seeds/<target>: the real files (raw mode byte 0x00 in front for the model target), small ones
# only so that libFuzzer's input length stays short; plus the committed seeds.
SEEDS="$BUILD/seeds"
rm -rf "$SEEDS"
for t in "${ALL_TARGETS[@]}"; do mkdir -p "$SEEDS/$t"; done
n=0
while IFS= read -r -d '' f; do
  n=$((n + 1)); cp "$f" "$SEEDS/fuzz_npy/real_$n.npy"
done < <(find "$ROOT/examples" "$ROOT/tests/data" -name '*.npy' -size -16k -print0 | sort -z)
n=0
while IFS= read -r -d '' f; do
  n=$((n + 1)); cp "$f" "$SEEDS/fuzz_input/real_$n.json"
done < <(find "$ROOT/examples" "$ROOT/tests/data" -name 'input*.json' -print0 | sort -z)
n=0
while IFS= read -r -d '' f; do
  n=$((n + 1)); { printf '\000'; cat "$f"; } >"$SEEDS/fuzz_model_file/raw_$n.dpk"
done < <(find "$ROOT/examples" "$ROOT/tests/data" \( -name '*.dpk' -o -name '*.ckpt-*' \) -size -64k -print0 | sort -z)
n=0
while IFS= read -r -d '' f; do
  n=$((n + 1)); cp "$f" "$SEEDS/fuzz_deepmd_yaml/real_$n.yaml"
done < <(find "$ROOT/examples" "$ROOT/tests/data" -name '*.yaml' -size -64k -print0 | sort -z)
for t in "${ALL_TARGETS[@]}"; do
  [ -d "$ROOT/tests/fuzz/seeds/$t" ] && cp "$ROOT/tests/fuzz/seeds/$t"/* "$SEEDS/$t/" 2>/dev/null || true
  rm -f "$SEEDS/$t/NOTICE"
done

# ---------------------------------------------------------------------------- runs
max_len() {
  case "$1" in fuzz_npy) echo 16384 ;; fuzz_input) echo 8192 ;; fuzz_model_file) echo 65536 ;; fuzz_deepmd_yaml) echo 65536 ;;
    fuzz_deepmd_hdf5) echo 65536 ;; fuzz_deepmd_model) echo 36864 ;; esac
}
mkdir -p "$BUILD/logs"
# run_target T: one libFuzzer run of T; writes its summary line to logs/T.result and exits 1 when
# the run reported a problem.
run_target() {
  local t="$1" corpus="$BUILD/corpus/$1" artifacts="$BUILD/artifacts/$1" log="$BUILD/logs/$1.log"
  [ "${DPK_FUZZ_KEEP_CORPUS:-0}" = 1 ] || rm -rf "$corpus"
  rm -rf "$artifacts"
  mkdir -p "$corpus" "$artifacts"
  local rc=0 start elapsed last execs cov ft rate found result kind
  start=$(date +%s)
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}" \
    "$BUILD/$t" -seed=1 -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
      -max_len="$(max_len "$t")" -print_final_stats=1 -artifact_prefix="$artifacts/" \
      "$corpus" "$SEEDS/$t" >"$log" 2>&1 || rc=$?
  elapsed=$(( $(date +%s) - start ))
  # Counters from libFuzzer's last status line ("#N DONE cov: X ft: Y ... exec/s: E").
  last=$(grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  [ -n "$execs" ] || execs=$(printf '%s\n' "$last" | sed -n 's/^#\([0-9]*\).*/\1/p')
  cov=$(printf '%s\n' "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
  ft=$(printf '%s\n' "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  found=$(ls "$artifacts" 2>/dev/null | head -1)
  if [ "$rc" = 0 ] && [ -z "$found" ]; then
    result=ok
  else
    kind=$(grep -m1 -oE 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)[^(]*' "$log" || true)
    [ -n "$kind" ] || kind=$(grep -m1 -oE 'runtime error: .*' "$log" || true)
    result="FAILED rc=$rc ${kind:-see log}${found:+, input $artifacts/$found}"
  fi
  echo "$t: ${execs:-?} execs, cov ${cov:-?}, ft ${ft:-?}, $result (${elapsed} s run, ${rate:-?} exec/s)" \
    | tee "$BUILD/logs/$t.result"
  [ "$result" = ok ]
}

# Targets run side by side, DPK_FUZZ_JOBS at a time (default: the CPUs; each libFuzzer process
# uses one), so CI's 60 s per target takes about 60 s x targets / CPUs.
jobs_max="${DPK_FUZZ_JOBS:-$(nproc)}"
case "$jobs_max" in ''|*[!0-9]*|0) echo "fuzz.sh: DPK_FUZZ_JOBS must be a positive integer, got '$jobs_max'" >&2; exit 2 ;; esac
running=0
for t in "${TARGETS[@]}"; do
  rm -f "$BUILD/logs/$t.result"
  echo "[fuzz] $t: ${SECONDS_PER_TARGET} s (log: $BUILD/logs/$t.log)"
  run_target "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs_max" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true
status=0
summary=()
for t in "${TARGETS[@]}"; do
  line=$(cat "$BUILD/logs/$t.result" 2>/dev/null || echo "$t: FAILED (no result: the run did not finish)")
  case "$line" in *", ok ("*) ;; *) status=1 ;; esac
  summary+=("$line")
done

echo "[fuzz] summary"
printf '%s\n' "${summary[@]}"
exit "$status"

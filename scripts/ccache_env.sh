# Sourced (bash) by scripts/test.sh, scripts/fuzz.sh, scripts/cuda_check.sh and .ci/run: when ccache
# is installed (scripts/bootstrap.sh installs it) and DPK_CCACHE is not 0, CMake compiles through it.
#
# - CCACHE_BASEDIR is the tree's root, so objects are shared between clones at different paths
#   (CI builds a fresh clone each time; the tests take their data paths from one small generated
#   file, tests/source_paths.hpp, not from -D flags).
# - The cache lives in one folder per CPU: the builds use -march=native, and ccache does not see
#   what "native" stands for, so an object built on another CPU model (say AVX-512) would be reused
#   on a machine without it. The folder is named after a hash of GCC's expansion of -march=native
#   (ISA, tuning, cache sizes) and /proc/cpuinfo's model name and flags.
# - Default folder /opt/dpk-deps/ccache/<cpu> (beside bootstrap.sh's dependencies) when writable,
#   else ~/.cache/dpk-ccache/<cpu>; CCACHE_DIR, if set, wins. Size limit 8 GB (CCACHE_MAXSIZE).
# - A user's own CMAKE_CXX_COMPILER_LAUNCHER is kept.
dpk_ccache_setup() {
  if [ "${DPK_CCACHE:-1}" = 0 ] || ! command -v ccache >/dev/null 2>&1; then
    return 0
  fi
  local root cpu base
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
  cpu=$({ g++ -march=native -E -v - </dev/null 2>&1 | grep -m1 ' -march=' | sed 's/^.* - -march=/-march=/'
          grep -m1 '^model name' /proc/cpuinfo; grep -m1 '^flags' /proc/cpuinfo; } | md5sum | cut -c1-12)
  if [ -z "${CCACHE_DIR:-}" ]; then
    base=/opt/dpk-deps/ccache
    if ! mkdir -p "$base" 2>/dev/null || [ ! -w "$base" ]; then
      base="${XDG_CACHE_HOME:-$HOME/.cache}/dpk-ccache"
    fi
    export CCACHE_DIR="$base/$cpu"
  fi
  export CCACHE_BASEDIR="$root"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
  export CMAKE_C_COMPILER_LAUNCHER="${CMAKE_C_COMPILER_LAUNCHER:-ccache}"
}
dpk_ccache_setup

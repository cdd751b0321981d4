# The common start of the live cross-checks against an installed DeePMD-kit (sourced by
# check_deepmd_interop.sh and check_deepmd_training.sh): `source deepmd_check_env.sh NAME [DPK_TRAIN]`.
# Sets ROOT, DPK_TRAIN (default build/openmp/examples/trainer/dpk-train), DP and PYTHON (from the
# environment, default dp and python3), WORK (default a fresh /tmp/dpk_<NAME without check_>.*),
# the thread and TensorFlow log variables, and say(); checks dp and dpk-train, then enters WORK.
set -euo pipefail
CHECK_NAME=$1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DPK_TRAIN=$(realpath "${2:-$ROOT/build/openmp/examples/trainer/dpk-train}")
DP=${DP:-dp}
PYTHON=${PYTHON:-python3}
WORK=${WORK:-$(mktemp -d "/tmp/dpk_${CHECK_NAME#check_}.XXXXXX")}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_PROC_BIND=false TF_CPP_MIN_LOG_LEVEL=3
say() { echo "[$CHECK_NAME] $*"; }
command -v "$DP" >/dev/null || { echo "DeePMD-kit's 'dp' not found (set DP=...)"; exit 2; }
[ -x "$DPK_TRAIN" ] || { echo "dpk-train not found at $DPK_TRAIN"; exit 2; }
say "work folder $WORK; $("$DP" --version 2>/dev/null | tail -1)"
mkdir -p "$WORK" && cd "$WORK"

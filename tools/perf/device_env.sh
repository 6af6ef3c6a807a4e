# Sourced by the scripts that run on the lent GPU machine (tools/gpu_suite.sh, tools/perf/*.sh): the checkout's
# root as working directory and import path, unbuffered output (logs survive a timeout), the NVRTC cache in /tmp,
# and $OUT (what the device tool brings back), created.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export FP8DISPATCH_CACHE_DIR=${FP8DISPATCH_CACHE_DIR:-/tmp/fp8dispatch-cache}

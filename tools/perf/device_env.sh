# Sourced by the scripts that run on the lent GPU machine (tools/gpu_suite.sh, tools/perf/*.sh): the checkout's
# root as working directory and import path, unbuffered output (logs survive a timeout), the NVRTC cache in /tmp,
# and $OUT (what the device tool brings back), created. fp8d_record_env FILE writes what a measurement must state
# (date, commit, the source digest of tools/perf/source_digest.py, GPU and driver, torch / triton / CUDA / cupy /
# numpy versions) to FILE and stdout.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export FP8DISPATCH_CACHE_DIR=${FP8DISPATCH_CACHE_DIR:-/tmp/fp8dispatch-cache}
fp8d_record_env() {
  {
    date -u +"date: %Y-%m-%dT%H:%M:%SZ"; echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo none)  (the device copy's git: it can lag the working tree sent)"
    echo "sources: $(python3 -m tools.perf.source_digest)  (the code that ran: compare with tools.perf.source_digest on a checkout)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
    python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
    python3 -c 'import cupy; print("cupy", cupy.__version__)' 2>&1 | tail -1
    python3 -c 'import numpy; print("numpy", numpy.__version__)' 2>&1 | tail -1  # Triton 3.6's interpreter needs < 2.4
  } | tee "$1"
}
# fp8d_pytest LOG LIMIT PYTEST-ARGS...: GPU tests over TEST_PROCS (12) processes within LIMIT seconds (each test within
# LIMIT - 10), the log to LOG; prints the exit status, the time, pytest's last line and the first failures.
fp8d_pytest() {
  local log=$1 limit=$2 t=$(date +%s); shift 2
  timeout "$limit" python3 -m pytest -q -p no:cacheprovider -n "${TEST_PROCS:-12}" --timeout=$(( limit - 10 )) "$@" > "$log" 2>&1
  echo "tests rc=$? $(( $(date +%s) - t )) s: $(tail -1 "$log")"; grep -E "^(FAILED|ERROR)" "$log" | head
}
# fp8d_pack_out: the device tool brings back at most 8 files from $OUT, at most two folders down ($OUT/a/b/file);
# the rest is dropped (session 38 lost call 2's merged tables that way). Past either limit, everything under $OUT
# is packed into $OUT/out.tgz (read it with `tar xzf out.tgz`). It runs when the outermost shell that sourced this
# file exits (a script run by such a script, with its own $OUT below, leaves the packing to it).
fp8d_pack_out() {
  local n deep; n=$(find "$OUT" -type f | wc -l); deep=$(find "$OUT" -mindepth 4 -type f | wc -l)
  if [ "$n" -gt 8 ] || [ "$deep" -gt 0 ]; then
    local tgz; tgz=$(mktemp /tmp/fp8d_out.XXXXXX) || return 1
    tar czf "$tgz" -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv "$tgz" "$OUT/out.tgz" \
      && echo "[fp8d_pack_out: $n files under $OUT packed into out.tgz]"
  fi
}
if [ -z "${FP8D_PACK_OWNER:-}" ]; then
  export FP8D_PACK_OWNER=$$ FP8D_PACK_DIR=$OUT
  trap 'OUT=$FP8D_PACK_DIR fp8d_pack_out' EXIT
fi

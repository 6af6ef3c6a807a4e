#!/usr/bin/env bash
# Session 13: programmatic dependent launch of the Triton GEMM chain (kernels_triton._pdl), one call (~5 min):
#   OUT=dir [AB_SHAPES=NxK,...] [AB_M=64,256] [AB_FORMATS=fmt/act,...] [SKIP_TESTS=1] bash tools/perf/ab_pdl_triton.sh
# Session 16, the Triton decode GEMVs: AB_FAMILY=gemv AB_M=1,4,16 (their own GPU tests: EXTRA_TESTS, below).
# 1. the GPU tests of the changed kernels (the Triton GEMMs and their split-K reduction; the Triton GEMV's graph /
#    dtype tests, which share the reduction), verbose, each test within TEST_CASE_TIMEOUT;
# 2. python -m tools.perf.ab_pdl: PDL off and on, the table's Triton GEMM config, the bench's workload and timing.
# Logs and data land in $OUT/ab_pdl.tgz.
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
t0=$(date +%s)
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout ${TEST_TIMEOUT:-200} python3 -m pytest -m gpu -v -p no:cacheprovider -n ${TEST_PROCS:-12} \
    --timeout=${TEST_CASE_TIMEOUT:-100} --tb=short -rfE --durations=8 tests/test_triton_gemm_gpu.py \
    ${EXTRA_TESTS:-} > "$W/gpu_tests.log" 2>&1
  echo "tests rc=$? $(( $(date +%s) - t0 )) s: $(tail -1 "$W/gpu_tests.log")"
  grep -E "^(FAILED|ERROR)|Timeout" "$W/gpu_tests.log" | head -20; grep -E "s (call|setup) " "$W/gpu_tests.log" | head -8
  fp8d_pytest "$W/gpu_tests_gemv.log" 150 -m gpu -k "dtypes or graph or pipelined" tests/test_triton_gemv.py
fi
timeout ${AB_TIMEOUT:-300} python3 -m tools.perf.ab_pdl --family ${AB_FAMILY:-gemm} --m ${AB_M:-64,256} \
  --shapes ${AB_SHAPES:-6144x4096,4096x4096,28672x4096,4096x14336,8192x8192,6656x2560,8192x2560} --rounds 2 \
  ${AB_FORMATS:+--formats $AB_FORMATS} --out "$W/ab_pdl.jsonl" > "$W/ab_pdl.log" 2>&1
echo "ab_pdl rc=$? $(( $(date +%s) - t0 )) s"
tar czf "$OUT/ab_pdl.tgz" -C "$W" .
python3 - "$W/ab_pdl.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
r = [x["us"]["on"] / x["us"]["off"] for x in rows]
if r:
    print(f"on vs off: geomean {math.exp(sum(map(math.log, r)) / len(r)):.3f}  min {min(r):.3f}  max {max(r):.3f}  n={len(r)}")
for x in rows:
    u = x["us"]
    print(f"{x['fmt']}/{x['act']} {x['n']}x{x['k']} M={x['m']} bf16 {x['bf16_us']:.2f} off {u['off']:.2f} on {u['on']:.2f}")
PY

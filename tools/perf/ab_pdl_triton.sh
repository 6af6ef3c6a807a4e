#!/usr/bin/env bash
# Session 13: programmatic dependent launch of the Triton GEMM chain (kernels_triton._pdl), one call (~6-8 min):
#   OUT=dir [AB_SHAPES=NxK,...] [AB_M=64,256] [SKIP_TESTS=1] bash tools/perf/ab_pdl_triton.sh
# 1. the GPU tests of the changed kernels (Triton GEMMs, their split-K reduction, the activation quantizers; the Triton
#    GEMV's graph / dtype tests, which share the last two) and of the dispatcher on the shipped table;
# 2. python -m tools.perf.ab_pdl: PDL off and in each mode, the table's Triton GEMM config, the bench's workload and
#    timing. Logs and data land in $OUT/ab_pdl.tgz.
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
t0=$(date +%s)
if [ -z "${SKIP_TESTS:-}" ]; then
  fp8d_pytest "$W/gpu_tests.log" ${TEST_TIMEOUT:-300} -m gpu --durations=10 tests/test_triton_gemm_gpu.py \
    tests/test_triton_act_quant.py tests/test_dispatch_gpu.py
  fp8d_pytest "$W/gpu_tests_gemv.log" 150 -m gpu -k "dtypes or graph or pipelined" tests/test_triton_gemv.py
fi
timeout ${AB_TIMEOUT:-300} python3 -m tools.perf.ab_pdl --m ${AB_M:-64,256} \
  --shapes ${AB_SHAPES:-6144x4096,4096x4096,28672x4096,4096x14336,8192x8192,6656x2560,8192x2560} --rounds 2 \
  --out "$W/ab_pdl.jsonl" > "$W/ab_pdl.log" 2>&1
echo "ab_pdl rc=$? $(( $(date +%s) - t0 )) s"
tar czf "$OUT/ab_pdl.tgz" -C "$W" .
python3 - "$W/ab_pdl.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for v in ("early", "late", "exit", "early_aq_plain"):
    r = [x["us"][v] / x["us"]["off"] for x in rows if v in x["us"]]
    if r:
        print(f"{v:15s} vs off: geomean {math.exp(sum(map(math.log, r)) / len(r)):.3f}  min {min(r):.3f}  max {max(r):.3f}  n={len(r)}")
for x in rows:
    u = x["us"]
    print(f"{x['fmt']}/{x['act']} {x['n']}x{x['k']} M={x['m']} bf16 {x['bf16_us']:.2f} " + " ".join(f"{k} {v:.2f}" for k, v in u.items()))
PY

#!/usr/bin/env bash
# A/B of the Triton W8A16 GEMM's bf16 decode on the lent GPU, one call (run in session 8: docs/perf/h200_triton_w8a16_ab_2026-11-29_s8.md):
#   OUT=dir bash tools/perf/ab_triton_fast_bf16.sh
# 1. the W8A16 GEMM GPU tests, the exact every-code test included (fast decode on: the default);
# 2. the autotune of triton.w8a16_gemm alone on fp8_row / fp8_block / mxfp8 (bf16 x) at M = 64..4096, baseline shapes,
#    with FP8DISPATCH_TRITON_FAST_BF16=0 (Triton's F2FP + F2F conversion) and =1 (prmt/and + bf16x2 fma);
# 3. the per-cell ratio of the best times (tools.perf.table_ab). Everything lands in $OUT/ab_fast_bf16.tgz.
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-gpu}
t0=$(date +%s)
fp8d_pytest "$W/gpu_tests.log" ${TEST_TIMEOUT:-240} tests/test_triton_gemm_gpu.py -k w8a16
for fast in 0 1; do
  FP8DISPATCH_TRITON_FAST_BF16=$fast timeout ${AT_TIMEOUT:-240} python3 -m tools.autotune --no-bf16 --top-k 1 \
    --shapes baseline --m ${MS:-64,256,1024,4096} --formats fp8_row:bf16,fp8_block:bf16,mxfp8:bf16 --only triton.w8a16_gemm \
    --max-configs ${CONFIGS:-6} --table "$W/t_fast$fast.yaml" --out "$W/at_fast$fast" > "$W/at_fast$fast.log" 2>&1
  echo "autotune FAST_BF16=$fast rc=$? $(( $(date +%s) - t0 )) s"
done
python3 -m tools.perf.table_ab "$W/t_fast0.yaml" "$W/t_fast1.yaml" --labels off,on   # off/on > 1: the fast decode is faster
tar czf "$OUT/ab_fast_bf16.tgz" -C "$W" .

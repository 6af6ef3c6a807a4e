#!/usr/bin/env bash
# Session 21: the one-launch W8A8 decode GEMV (cuda.w8a8_gemv_fq, kernels_cuda/_w8a8_fused.py), one call (~8 min):
#   OUT=dir [GEMV_CONFIGS=4] [BENCH=1] bash tools/perf/fused_w8a8.sh
# 1. the CUDA kernels' GPU tests (the one-launch GEMV bit-identical to the two-launch route on every path, in a graph
#    with programmatic launches; the rest of tests/test_cuda_kernels.py) and the dispatcher's GPU tests;
# 2. only if they pass: every candidate on every W8A8 decode key it serves (M = 1, 4: the new candidate serves M <= 8),
#    both CUDA GEMVs with GEMV_CONFIGS configs plus the shipped one, merged into the shipped table;
# 3. the W8A8 decode bench (M = 1, 4, 16) on the merged table.
# Returned (at most 8 files): env.txt, summary.txt, nvidia_h200.yaml (step 2), fused_w8a8.tgz (logs, journals, bench).
source "$(dirname "$0")/device_env.sh"; DEST=$OUT; W=$(mktemp -d); fp8d_record_env "$DEST/env.txt" > /dev/null
t0=$(date +%s)
{
timeout ${PRECOMPILE_TIMEOUT:-90} python3 -m tools.perf.precompile_cuda > "$W/precompile.log" 2>&1
echo "precompile rc=$? $(( $(date +%s) - t0 )) s"
TEST_PROCS=${TEST_PROCS:-14} fp8d_pytest "$W/gpu_tests.log" ${TEST_TIMEOUT:-170} tests/test_cuda_kernels.py tests/test_dispatch_gpu.py
if grep -qE "^(FAILED|ERROR)" "$W/gpu_tests.log" || ! grep -q " passed" "$W/gpu_tests.log"; then
  echo "tests failed: no re-tune"
else
  timeout ${RETUNE_TIMEOUT:-250} python3 -m tools.autotune --no-bf16 --top-k 2 --retune --keep-configs tuning_db/nvidia_h200.yaml \
    --shapes baseline --m 1,4 --formats fp8_block:fp8,fp8_row:fp8,fp8_tensor:fp8 --max-configs 3 \
    --max-configs-for cuda.w8a8_gemv=${GEMV_CONFIGS:-4} cuda.w8a8_gemv_fq=${GEMV_CONFIGS:-4} \
    --table "$W/t_decode_w8a8.yaml" --out "$W/at_decode_w8a8" > "$W/at_decode_w8a8.log" 2>&1
  echo "retune rc=$? $(( $(date +%s) - t0 )) s"; tail -2 "$W/at_decode_w8a8.log"
  mkdir -p "$W/tables"
  python3 -m tools.perf.merge_tables tuning_db/nvidia_h200.yaml "$W/t_decode_w8a8.yaml" --drop-stale \
    --out "$W/tables/nvidia_h200.yaml" 2>&1 | tail -3
  cp "$W/tables/nvidia_h200.yaml" "$DEST/" 2>/dev/null
  if [ "${BENCH:-1}" = 1 ]; then
    timeout ${BENCH_TIMEOUT:-130} python3 -m tools.bench --what main --shapes baseline --m 1,4,16 \
      --formats fp8_block,fp8_tensor,fp8_row:fp8 --no-candidates --tables "$W/tables" --budget-s 90 --out "$W/bench" \
      > "$W/bench.log" 2>&1
    echo "bench rc=$? $(( $(date +%s) - t0 )) s"; grep -A8 "^| target" "$W/bench.log" | head -8
  fi
fi
} 2>&1 | tee "$DEST/summary.txt"
tar czf "$DEST/fused_w8a8.tgz" -C "$W" .

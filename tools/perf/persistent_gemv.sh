#!/usr/bin/env bash
# Session 22: persistent grids for the CUDA decode GEMVs, one call (~9 min):
#   OUT=dir [FQ_CONFIGS=6] [GEMV_CONFIGS=4] [PROBE=1] [RETUNE=1] [BENCH=1] bash tools/perf/persistent_gemv.sh
# 1. the CUDA kernels' GPU tests (the one-launch W8A8 GEMV persistent and not, bit-identical to the two-launch route on
#    every path and on a weight of more row tiles than the resident CTAs) and the dispatcher's GPU tests;
# 2. only if they pass:
#    a. tools/perf/probe_persistent_gemv.py: the W8A16 GEMV on a persistent grid against the shipped launcher;
#    b. every candidate on every W8A8 decode key at M = 1, 4 (the one-launch GEMV with FQ_CONFIGS configs: persistent
#       first, the session-21 kernel second), merged into the shipped table;
#    c. the W8A8 decode bench (M = 1, 4, 16) on the merged table.
# Returned (at most 8 files): env.txt, summary.txt, nvidia_h200.yaml (step 2b), persistent_gemv.tgz (logs, journals,
# probe, bench).
source "$(dirname "$0")/device_env.sh"; DEST=$OUT; W=$(mktemp -d); fp8d_record_env "$DEST/env.txt" > /dev/null
t0=$(date +%s)
{
timeout ${PRECOMPILE_TIMEOUT:-120} python3 -m tools.perf.precompile_cuda > "$W/precompile.log" 2>&1
echo "precompile rc=$? $(( $(date +%s) - t0 )) s"
TEST_PROCS=${TEST_PROCS:-14} fp8d_pytest "$W/gpu_tests.log" ${TEST_TIMEOUT:-170} tests/test_cuda_kernels.py tests/test_dispatch_gpu.py
if grep -qE "^(FAILED|ERROR)" "$W/gpu_tests.log" || ! grep -q " passed" "$W/gpu_tests.log"; then
  echo "tests failed: no probe, re-tune or bench"
else
  if [ "${PROBE:-1}" = 1 ]; then
    timeout ${PROBE_TIMEOUT:-150} python3 -m tools.perf.probe_persistent_gemv --m ${PROBE_M:-1,4,16} \
      --out "$W/probe_persistent.jsonl" > "$W/probe.log" 2>&1
    echo "probe rc=$? $(( $(date +%s) - t0 )) s"; grep -A80 "^| format" "$W/probe.log"
  fi
  if [ "${RETUNE:-1}" = 1 ]; then
    timeout ${RETUNE_TIMEOUT:-250} python3 -m tools.autotune --no-bf16 --top-k 2 --retune --keep-configs tuning_db/nvidia_h200.yaml \
      --shapes baseline --m 1,4 --formats fp8_block:fp8,fp8_row:fp8,fp8_tensor:fp8 --max-configs 3 \
      --max-configs-for cuda.w8a8_gemv=${GEMV_CONFIGS:-4} cuda.w8a8_gemv_fq=${FQ_CONFIGS:-6} \
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
fi
} 2>&1 | tee "$DEST/summary.txt"
tar czf "$DEST/persistent_gemv.tgz" -C "$W" .

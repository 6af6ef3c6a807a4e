#!/usr/bin/env bash
# Session 23: tables tuned on decode tiles (tuning_db/nvidia_h200_decode_tiles.yaml), one call (~7 min):
#   OUT=dir [TESTS=1] [SUITE=0] [RETUNE=1] [BENCH=1] [BENCH_UNTILED=0] [UNTABLED=0] bash tools/perf/tiles_tables.sh
# 1. the decode-tiles GPU tests (the GEMVs on tiles bit-identical to the row-major codes, every config; dispatch's
#    hand-over to the variants on tiles; CUDA graphs) and the dispatcher's GPU tests;
# 2. only if they pass:
#    a. autotune --decode-tiles on every decode key of the shipped table (8 shapes x 5 format/acts x M = 1, 4, 16):
#       the variants on tiles with every config; every other candidate that holds a decode key of the row-major table
#       (CUDA GEMVs, the one-launch W8A8 GEMV, _scaled_mm, the Triton W8A8 GEMM and GEMV) with its default config and
#       the config the row-major table chose (--keep-configs), timed in the same run;
#    b. the decode bench with tiles on that table (tools.bench --decode-tiles, M = 1, 4, 16); BENCH_UNTILED=1: first the
#       same bench without tiles (the default path), in the same call.
# UNTABLED=1: last, the shapes in no table with tiles (tools.bench --what untabled --decode-tiles, M = 1, 16): the fallback
#    chain's pick for a weight with tiles against autotuning that shape with tiles (3 configs a candidate).
# SUITE=1: the whole GPU test suite (pytest -m gpu tests) instead of step 1's files. Re-check of the shipped tables
# (session 23, call 3): SUITE=1 RETUNE=0 BENCH_UNTILED=1 GATE=0.
# Returned: env.txt, summary.txt, nvidia_h200_decode_tiles.yaml (step 2a), tiles_tables.tgz (logs, journal, bench).
source "$(dirname "$0")/device_env.sh"; DEST=$OUT; W=$(mktemp -d); fp8d_record_env "$DEST/env.txt" > /dev/null
t0=$(date +%s)
FORMATS=fp8_block:fp8,fp8_tensor:fp8,fp8_row:fp8,fp8_row,mxfp8
{
python3 -m tools.perf.source_digest
timeout ${PRECOMPILE_TIMEOUT:-120} python3 -m tools.perf.precompile_cuda --paths ${PRECOMPILE_PATHS:-native,sm80,emulated} \
  > "$W/precompile.log" 2>&1
echo "precompile rc=$? $(( $(date +%s) - t0 )) s"
ok=1
if [ "${SUITE:-0}" = 1 ]; then
  HYPOTHESIS_PROFILE=gpu TEST_PROCS=${TEST_PROCS:-14} fp8d_pytest "$W/gpu_tests.log" ${TEST_TIMEOUT:-330} -m gpu tests
elif [ "${TESTS:-1}" = 1 ]; then
  TEST_PROCS=${TEST_PROCS:-14} fp8d_pytest "$W/gpu_tests.log" ${TEST_TIMEOUT:-150} tests/test_cuda_kernels.py -k "tiles or test_dispatch_gpu" \
    tests/test_dispatch_gpu.py
fi
if [ -f "$W/gpu_tests.log" ]; then
  if grep -qE "^(FAILED|ERROR)" "$W/gpu_tests.log" || ! grep -q " passed" "$W/gpu_tests.log"; then
    echo "tests failed: no re-tune or bench"; ok=0
  fi
fi
[ "${GATE:-1}" = 0 ] && ok=1  # GATE=0: the benches run whatever the tests said (a re-check; never with a re-tune)
mkdir -p "$W/tables"
if [ $ok = 1 ] && [ "${RETUNE:-1}" = 1 ]; then
  timeout ${RETUNE_TIMEOUT:-300} python3 -m tools.autotune --decode-tiles --no-bf16 --top-k 2 \
    --keep-configs tuning_db/nvidia_h200.yaml --shapes baseline --m 1,4,16 --formats $FORMATS \
    --only cuda,torch.scaled_mm*,triton.w8a8_gemm,triton.w8a8_gemv --max-configs 1 \
    --max-configs-for cuda.w8a16_gemv_tiles=0 cuda.w8a8_gemv_tiles=0 \
    --table "$W/tables/nvidia_h200_decode_tiles.yaml" --out "$W/at_tiles" > "$W/at_tiles.log" 2>&1
  echo "retune rc=$? $(( $(date +%s) - t0 )) s"; tail -2 "$W/at_tiles.log"
  cp "$W/tables/nvidia_h200_decode_tiles.yaml" "$DEST/" 2>/dev/null
fi
if [ $ok = 1 ] && [ "${BENCH_UNTILED:-0}" = 1 ]; then
  timeout ${BENCH_TIMEOUT:-200} python3 -m tools.bench --what main --shapes baseline --m 1,4,16 \
    --formats fp8_row,mxfp8,fp8_block,fp8_tensor,fp8_row:fp8 --no-candidates --budget-s ${BENCH_BUDGET_S:-160} \
    --out "$W/bench_untiled" > "$W/bench_untiled.log" 2>&1
  echo "bench without tiles rc=$? $(( $(date +%s) - t0 )) s"; grep -A8 "^| target" "$W/bench_untiled.log" | head -8
fi
if [ $ok = 1 ] && [ "${BENCH:-1}" = 1 ]; then
  timeout ${BENCH_TIMEOUT:-200} python3 -m tools.bench --what main --shapes baseline --m 1,4,16 \
    --formats fp8_row,mxfp8,fp8_block,fp8_tensor,fp8_row:fp8 --no-candidates --decode-tiles --tables "$W/tables" \
    --budget-s ${BENCH_BUDGET_S:-160} --out "$W/bench" > "$W/bench.log" 2>&1
  echo "bench rc=$? $(( $(date +%s) - t0 )) s"; grep -A8 "^| target" "$W/bench.log" | head -8
fi
if [ $ok = 1 ] && [ "${UNTABLED:-0}" = 1 ]; then
  timeout ${UNTABLED_TIMEOUT:-300} python3 -m tools.bench --what untabled --untabled-m 1,16 \
    --formats fp8_row,mxfp8,fp8_block,fp8_tensor,fp8_row:fp8 --decode-tiles --budget-s ${UNTABLED_BUDGET_S:-240} \
    --out "$W/untabled" > "$W/untabled.log" 2>&1
  echo "untabled rc=$? $(( $(date +%s) - t0 )) s"; grep -iA12 "untabled" "$W/untabled.log" | tail -14
fi
} 2>&1 | tee "$DEST/summary.txt"
tar czf "$DEST/tiles_tables.tgz" -C "$W" .

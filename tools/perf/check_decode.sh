#!/usr/bin/env bash
# Closing check of a decode change on the lent GPU machine (session 5, 2026-11-29), one call:
#   OUT=dir [UNTABLED_SHAPES=NxK,...] [UNTABLED_M=1,16] [TESTS=files] bash tools/perf/check_decode.sh
# 1. the GPU tests of the CUDA backend and the dispatcher on the shipped table; 2. the shapes in no table at the
# decode M (fallback chain vs autotuning them, tools.bench --what untabled). Everything lands in
# $OUT/check_decode.tgz (one file: the device tool returns a limited number of files).
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-200} python3 -m pytest -m gpu -q -p no:cacheprovider -n ${TEST_PROCS:-12} --timeout=150 \
  ${TESTS:-tests/test_cuda_kernels.py tests/test_cuda_driver.py tests/test_dispatch_gpu.py} > "$W/gpu_tests.log" 2>&1
echo "tests rc=$? $(( $(date +%s) - t0 )) s: $(tail -1 "$W/gpu_tests.log")"; grep -E "^(FAILED|ERROR)" "$W/gpu_tests.log" | head -20
timeout ${UNTABLED_TIMEOUT:-240} python3 -m tools.bench --what untabled --untabled-m ${UNTABLED_M:-1,16} \
  ${UNTABLED_SHAPES:+--untabled-shapes $UNTABLED_SHAPES} \
  --formats fp8_block,fp8_tensor,fp8_row,mxfp8 --tables tuning_db --out "$W/untabled" > "$W/untabled.log" 2>&1
echo "untabled rc=$? $(( $(date +%s) - t0 )) s"; grep "^\[bench\] untabled" "$W/untabled.log" | tail -40
tar czf "$OUT/check_decode.tgz" -C "$W" .

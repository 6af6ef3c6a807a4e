#!/usr/bin/env bash
# Session 4's second H200 call (2026-11-29), after tools/perf/retune_pdl.sh:
#   OUT=dir T_DECODE=t_decode.yaml T_DEQUANT=t_dequant.yaml bash tools/perf/check_pdl.sh
# 1. the Triton GEMV key again (its table of the first call did not come back) and the merged table;
# 2. host time per call, plain launches against programmatic ones (FP8DISPATCH_PDL=0 / 1, same machine);
# 3. the untabled shape 3000x1000 after the M <= 16 tile rule; 4. the GPU tests of the code this session changed.
# Everything lands in $OUT/check_pdl.tgz (one file: the device tool returns a limited number of files).
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null; mkdir -p "$W/tables"
t0=$(date +%s)
python3 -m tools.autotune --no-bf16 --top-k 2 --retune --keep-configs tuning_db/nvidia_h200.yaml --shapes 128256x4096 \
  --m 64 --formats fp8_row --max-configs 3 --table "$W/t_gemv64.yaml" --out "$W/at_gemv64" > "$W/at_gemv64.log" 2>&1
echo "gemv M=64 autotune rc=$? $(( $(date +%s) - t0 )) s"
python3 -m tools.perf.merge_tables tuning_db/nvidia_h200.yaml "$T_DECODE" "$T_DEQUANT" "$W/t_gemv64.yaml" --drop-stale \
  --out "$W/tables/nvidia_h200.yaml" 2>&1 | tail -3
for p in 0 1; do
  FP8DISPATCH_PDL=$p timeout 120 python3 -m tools.bench --what overhead --tables "$W/tables" --out "$W/overhead_pdl$p" \
    > "$W/overhead_pdl$p.log" 2>&1; echo "overhead PDL=$p rc=$?"; grep -A6 "^| format/act | candidate" "$W/overhead_pdl$p.log"
done
timeout 100 python3 -m tools.bench --what untabled --untabled-shapes 3000x1000 --untabled-m 1,16 --tables "$W/tables" \
  --out "$W/untabled" > "$W/untabled.log" 2>&1; echo "untabled rc=$? $(( $(date +%s) - t0 )) s"
grep "^\[bench\] untabled" "$W/untabled.log"
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu -q -p no:cacheprovider -n ${TEST_PROCS:-12} --timeout=200 \
  ${TESTS:-tests/test_cuda_kernels.py tests/test_dispatch_gpu.py} > "$W/gpu_tests.log" 2>&1
echo "tests rc=$? $(( $(date +%s) - t0 )) s: $(tail -1 "$W/gpu_tests.log")"; grep -E "^(FAILED|ERROR)" "$W/gpu_tests.log" | head -20
tar czf "$OUT/check_pdl.tgz" -C "$W" .

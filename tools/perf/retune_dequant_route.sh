#!/usr/bin/env bash
# Re-tune after an edit to cuda.dequant_cublas (kernels_cuda/_dequant_route.py or csrc/dequant.cu: its entries go
# stale), then bench the merged table for the W8A16 formats at M >= 64. One call of ~5 min:
#   OUT=dir bash tools/perf/retune_dequant_route.sh
# 1. its GPU tests (tests/test_cuda_kernels.py, the dequant and candidate ones);
# 2. EVERY candidate on fp8_row/bf16 and mxfp8/bf16 at M = 64..4096 (the keys where the route competes), the Triton
#    GEMM with GEMM_CONFIGS configs, the others with 3, as the shipped table was tuned;
# 3. merge_tables --drop-stale (refuses if a dropped key was not re-tuned) -> $OUT/nvidia_h200.yaml;
# 4. the bench of fp8_row and mxfp8 at M = 64..4096 on the merged table. Everything lands in $OUT/retune_dequant.tgz.
source "$(dirname "$0")/device_env.sh"; DEST=$OUT; W=$(mktemp -d); mkdir -p "$W/tables"; fp8d_record_env "$W/env.txt" > /dev/null
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-gpu}
t0=$(date +%s)
fp8d_pytest "$W/gpu_tests.log" ${TEST_TIMEOUT:-150} tests/test_cuda_kernels.py -k "dequant or candidates_run"
AT="python3 -m tools.autotune --shapes baseline --no-bf16 --top-k 2 --retune --keep-configs tuning_db/nvidia_h200.yaml --max-configs 3"
$AT --max-configs-for triton.w8a16_gemm=${GEMM_CONFIGS:-8} --m 64,256,1024,4096 --formats fp8_row:bf16,mxfp8:bf16 \
  --table "$W/t_w8a16.yaml" --out "$W/at_w8a16" > "$W/at_w8a16.log" 2>&1
echo "W8A16 autotune rc=$? $(( $(date +%s) - t0 )) s"
python3 -m tools.perf.merge_tables tuning_db/nvidia_h200.yaml "$W/t_w8a16.yaml" --drop-stale \
  --out "$W/tables/nvidia_h200.yaml" 2>&1 | tail -6 | tee "$W/merge.log"
cp "$W/tables/nvidia_h200.yaml" "$DEST/" 2>/dev/null
python3 -m tools.bench --what main --shapes baseline --m 64,256,1024,4096 --formats fp8_row,mxfp8 \
  --no-candidates --tables "$W/tables" --budget-s ${BENCH_BUDGET:-80} --out "$W/bench" > "$W/bench.log" 2>&1
echo "bench rc=$? $(( $(date +%s) - t0 )) s"; tail -30 "$W/bench.log"
tar czf "$DEST/retune_dequant.tgz" -C "$W" .

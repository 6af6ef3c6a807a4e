#!/usr/bin/env bash
# Re-tune after the Triton GEMM split-K change (session 3, 2026-11-29), then bench the merged table.
#   OUT=dir bash tools/perf/retune_gemm_split_k.sh
# 1. the Triton GEMMs alone at M = 64, 256 (their new small-tile / split-K spaces), merged where faster;
# 2. EVERY candidate on the keys whose shipped winner was a Triton GEMM (its entries are stale after the edit,
#    and the runner-up is not in the table): fp8_row/bf16 at M = 256..4096, mxfp8/bf16 and fp8_row/fp8 at
#    M = 64, 256;
# 3. merge_tables --drop-stale (refuses if a dropped key was not re-tuned), 4. the bench on the merged table.
source "$(dirname "$0")/device_env.sh"; mkdir -p "$OUT/tables"
AT="python3 -m tools.autotune --shapes baseline --no-bf16 --top-k 2"
t0=$(date +%s)
$AT --only triton.w8a16_gemm,triton.w8a8_gemm --m 64,256 --formats fp8_block,fp8_tensor,fp8_row,mxfp8,fp8_row:fp8 \
  --max-configs ${GEMM_CONFIGS:-10} --budget-s ${GEMM_BUDGET:-200} --table "$OUT/t_gemm.yaml" --out "$OUT/at_gemm" \
  > "$OUT/at_gemm.log" 2>&1; echo "gemm autotune rc=$? $(( $(date +%s) - t0 )) s"
$AT --m 256,1024,4096 --formats fp8_row --max-configs 3 --table "$OUT/t_row.yaml" --out "$OUT/at_row" \
  > "$OUT/at_row.log" 2>&1; echo "fp8_row autotune rc=$? $(( $(date +%s) - t0 )) s"
$AT --m 64,256 --formats mxfp8,fp8_row:fp8 --max-configs 3 --table "$OUT/t_mx.yaml" --out "$OUT/at_mx" \
  > "$OUT/at_mx.log" 2>&1; echo "mxfp8/fp8_row:fp8 autotune rc=$? $(( $(date +%s) - t0 )) s"
python3 -m tools.perf.merge_tables tuning_db/nvidia_h200.yaml "$OUT/t_gemm.yaml" "$OUT/t_row.yaml" "$OUT/t_mx.yaml" \
  --drop-stale --out "$OUT/tables/nvidia_h200.yaml" 2>&1 | tee "$OUT/merge.log"
python3 -m tools.bench --what main,overhead --shapes baseline --m 1,4,16,64,256,1024,4096 \
  --formats fp8_block,fp8_tensor,fp8_row,mxfp8 --no-candidates --tables "$OUT/tables" --budget-s ${BENCH_BUDGET:-120} \
  --out "$OUT/bench" > "$OUT/bench.log" 2>&1; echo "bench rc=$? $(( $(date +%s) - t0 )) s"
tail -45 "$OUT/bench.log"

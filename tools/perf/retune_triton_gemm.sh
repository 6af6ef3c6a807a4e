#!/usr/bin/env bash
# Re-tune after an edit to the Triton GEMM kernels (kernels_triton/_gemm*.py: every triton.w8a16_gemm and
# triton.w8a8_gemm entry goes stale), then bench the merged table at M >= 64. One call of ~6-8 min:
#   OUT=dir [GEMM_CONFIGS=8] [EXTRA_AT="--m 1024,4096 --formats fp8_block:fp8"] [BENCH=0] bash tools/perf/retune_triton_gemm.sh
# 1. EVERY candidate on the keys whose shipped winner is a Triton GEMM (session 7's table: fp8_row/bf16 at
#    M = 64..4096, mxfp8/bf16 at 64, fp8_block/fp8 and fp8_row/fp8 at 16, 64, 256, fp8_tensor/fp8 at 64), the Triton
#    GEMMs with GEMM_CONFIGS configs, the others with 3 (as the shipped table was tuned);
#    RETUNE_SETS="--m 64,256 --formats fp8_tensor:fp8;--m 16 --formats ..." replaces step 1's key sets with
#    these (';'-separated autotune arguments; session 19's quantizer change staled the W8A8 entries only);
# 2. merge_tables --drop-stale (refuses if a dropped key was not re-tuned) -> $OUT/nvidia_h200.yaml;
# 3. the bench at M = 64..4096 on the merged table. Everything else lands in $OUT/retune_triton.tgz.
source "$(dirname "$0")/device_env.sh"; DEST=$OUT; W=$(mktemp -d); mkdir -p "$W/tables"; fp8d_record_env "$W/env.txt" > /dev/null
AT="python3 -m tools.autotune --shapes baseline --no-bf16 --top-k 2 --retune --keep-configs tuning_db/nvidia_h200.yaml --max-configs 3"
MC="--max-configs-for triton.w8a16_gemm=${GEMM_CONFIGS:-8} triton.w8a8_gemm=${GEMM_CONFIGS:-8}"
t0=$(date +%s)
tables=()
if [ -n "${RETUNE_SETS:-}" ]; then
  IFS=';' read -ra sets <<< "$RETUNE_SETS"
  for i in "${!sets[@]}"; do
    $AT $MC ${sets[$i]} --table "$W/t_set$i.yaml" --out "$W/at_set$i" > "$W/at_set$i.log" 2>&1
    echo "set $i (${sets[$i]}) rc=$? $(( $(date +%s) - t0 )) s"; tables+=("$W/t_set$i.yaml")
  done
else
$AT $MC --m 64,256,1024,4096 --formats fp8_row:bf16 --table "$W/t_row.yaml" --out "$W/at_row" > "$W/at_row.log" 2>&1
echo "fp8_row/bf16 rc=$? $(( $(date +%s) - t0 )) s"
$AT $MC --m 64,256 --formats mxfp8,fp8_block:fp8,fp8_row:fp8,fp8_tensor:fp8 --table "$W/t_w8a8.yaml" --out "$W/at_w8a8" \
  > "$W/at_w8a8.log" 2>&1
echo "W8A8 + mxfp8 at M = 64, 256 rc=$? $(( $(date +%s) - t0 )) s"
$AT $MC --m 16 --formats fp8_block:fp8,fp8_row:fp8 --table "$W/t_m16.yaml" --out "$W/at_m16" > "$W/at_m16.log" 2>&1
echo "W8A8 at M = 16 rc=$? $(( $(date +%s) - t0 )) s"
tables=("$W/t_row.yaml" "$W/t_w8a8.yaml" "$W/t_m16.yaml")
fi
extra=()
if [ -n "${EXTRA_AT:-}" ]; then  # more keys with every candidate, e.g. EXTRA_AT="--m 1024,4096 --formats fp8_block:fp8"
  $AT $MC $EXTRA_AT --table "$W/t_extra.yaml" --out "$W/at_extra" > "$W/at_extra.log" 2>&1
  echo "extra ($EXTRA_AT) rc=$? $(( $(date +%s) - t0 )) s"; extra=("$W/t_extra.yaml")
fi
python3 -m tools.perf.merge_tables tuning_db/nvidia_h200.yaml "${tables[@]}" "${extra[@]}" --drop-stale \
  --out "$W/tables/nvidia_h200.yaml" 2>&1 | tail -6 | tee "$W/merge.log"
cp "$W/tables/nvidia_h200.yaml" "$DEST/" 2>/dev/null
if [ "${BENCH:-1}" = 1 ]; then
  python3 -m tools.bench --what main --shapes baseline --m 64,256,1024,4096 --formats fp8_block,fp8_tensor,fp8_row,mxfp8 \
    --no-candidates --tables "$W/tables" --budget-s ${BENCH_BUDGET:-100} --out "$W/bench" > "$W/bench.log" 2>&1
  echo "bench rc=$? $(( $(date +%s) - t0 )) s"; tail -40 "$W/bench.log"
fi
tar czf "$DEST/retune_triton.tgz" -C "$W" .

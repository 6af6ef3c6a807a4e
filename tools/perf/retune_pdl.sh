#!/usr/bin/env bash
# Re-tune after the CUDA launcher gained programmatic dependent launches (session 4, 2026-11-29), then bench
# the decode cells of the merged table.   OUT=dir bash tools/perf/retune_pdl.sh
# The edit changed the source hash of every CUDA candidate (kernels_cuda/_driver.py, _launch.py,
# csrc/skinny_common.cuh) and of the Triton GEMV (kernels_triton/configs.py), so their 126 entries are stale:
# 1. EVERY candidate on the decode keys (M = 1, 4, 16: the CUDA GEMV winners' keys), old winners retried;
# 2. cuda.dequant_cublas alone on its mxfp8 keys at M = 256..4096: its kernel and its (plain, non-PDL) launch
#    are unchanged, only the hash of the shared launcher moved, so the other candidates' old times still compare;
# 3. every candidate on the one Triton GEMV key (fp8_row 128256x4096, M = 64);
# 4. merge_tables --drop-stale (refuses if a dropped key was not re-tuned), 5. the bench at M = 1, 4, 16.
source "$(dirname "$0")/device_env.sh"; mkdir -p "$OUT/tables"
AT="python3 -m tools.autotune --no-bf16 --top-k 2 --retune --keep-configs tuning_db/nvidia_h200.yaml"
t0=$(date +%s)
$AT --shapes baseline --m 1,4,16 --formats fp8_block,fp8_tensor,fp8_row,mxfp8,fp8_row:fp8 --max-configs ${DECODE_CONFIGS:-2} \
  --budget-s ${DECODE_BUDGET:-360} --table "$OUT/t_decode.yaml" --out "$OUT/at_decode" > "$OUT/at_decode.log" 2>&1
echo "decode autotune rc=$? $(( $(date +%s) - t0 )) s"; tail -3 "$OUT/at_decode.log"
$AT --shapes baseline --m 256,1024,4096 --formats mxfp8 --only cuda.dequant_cublas --max-configs 2 \
  --table "$OUT/t_dequant.yaml" --out "$OUT/at_dequant" > "$OUT/at_dequant.log" 2>&1
echo "dequant autotune rc=$? $(( $(date +%s) - t0 )) s"
$AT --shapes 128256x4096 --m 64 --formats fp8_row --max-configs 3 --table "$OUT/t_gemv64.yaml" --out "$OUT/at_gemv64" \
  > "$OUT/at_gemv64.log" 2>&1; echo "gemv M=64 autotune rc=$? $(( $(date +%s) - t0 )) s"
python3 -m tools.perf.merge_tables tuning_db/nvidia_h200.yaml "$OUT/t_decode.yaml" "$OUT/t_dequant.yaml" \
  "$OUT/t_gemv64.yaml" --drop-stale --out "$OUT/tables/nvidia_h200.yaml" 2>&1 | tail -8 | tee "$OUT/merge.log"
python3 -m tools.bench --what main,overhead --shapes baseline --m 1,4,16 --formats fp8_block,fp8_tensor,fp8_row,mxfp8 \
  --no-candidates --tables "$OUT/tables" --budget-s ${BENCH_BUDGET:-100} --out "$OUT/bench" > "$OUT/bench.log" 2>&1
echo "bench rc=$? $(( $(date +%s) - t0 )) s"
tail -30 "$OUT/bench.log"

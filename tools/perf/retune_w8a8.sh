#!/usr/bin/env bash
# Re-tune every W8A8 key (fp8_block, fp8_row, fp8_tensor with fp8 activations) with every candidate, after an edit
# of the Triton activation quantizer (kernels_triton/_act_quant.py staled the `_scaled_mm` and Triton W8A8 GEMM
# entries; session 19). One call of ~5-8 min; each key set within its own limit, its table written to $OUT, so a
# limit that hits one set keeps the others. Merge on any machine afterwards:
#   OUT=dir bash tools/perf/retune_w8a8.sh          # tables t_*.yaml; journals and logs in retune_w8a8.tgz
#   python -m tools.perf.merge_tables tuning_db/nvidia_h200.yaml dir/t_*.yaml --drop-stale --out tuning_db/nvidia_h200.yaml
# The Triton GEMMs get GEMM_CONFIGS configs (8), the others 3, plus the shipped entry's config (as the table was tuned).
source "$(dirname "$0")/device_env.sh"; fp8d_record_env "$OUT/env.txt" > /dev/null
t0=$(date +%s); timeout ${PRECOMPILE_TIMEOUT:-90} python3 -m tools.perf.precompile_cuda > "$OUT/precompile.log" 2>&1
echo "precompile rc=$? $(( $(date +%s) - t0 )) s"
AT="python3 -m tools.autotune --shapes baseline --no-bf16 --top-k 2 --retune --keep-configs tuning_db/nvidia_h200.yaml --max-configs 3"
MC="--max-configs-for triton.w8a16_gemm=${GEMM_CONFIGS:-8} triton.w8a8_gemm=${GEMM_CONFIGS:-8}"
W8A8=fp8_block:fp8,fp8_row:fp8,fp8_tensor:fp8
run_set() {  # name limit autotune-args...
  local name=$1 limit=$2; shift 2
  timeout "$limit" $AT $MC "$@" --table "$OUT/t_$name.yaml" --out "$OUT/at_$name" > "$OUT/at_$name.log" 2>&1
  echo "set $name ($*) rc=$? $(( $(date +%s) - t0 )) s"; tail -3 "$OUT/at_$name.log"
}
run_set m16_256 ${LIMIT_A:-260} --m 16,64,256 --formats $W8A8
run_set m1024_4096 ${LIMIT_B:-200} --m 1024,4096 --formats $W8A8
run_set m1_4 ${LIMIT_C:-80} --m 1,4 --formats fp8_tensor:fp8  # the other formats hold CUDA GEMV entries there (not stale)
# What comes back from the lent machine is at most 8 files: the journals (every candidate's times, for
# tools.heuristic_eval --write-cells) and the logs travel in one archive.
tar czf "$OUT/retune_w8a8.tgz" -C "$OUT" at_m16_256 at_m1024_4096 at_m1_4 at_m16_256.log at_m1024_4096.log at_m1_4.log \
  precompile.log && rm -rf "$OUT"/at_m* "$OUT/precompile.log"

#!/usr/bin/env bash
# Re-tune after session 29's host-side launcher change (kernels_triton/_fast_launch.py, _gemm_launch.py, _act_quant.py,
# kernels_cuda/_wgmma_gemm.py: the entries of triton.w8a16_gemm, triton.w8a8_gemm, torch.scaled_mm_* and
# cuda.w8a16_gemm_wgmma go stale; the kernels they launch did not change, the host code around the launch did).
#   OUT=dir [WORK=dir of an earlier call, to resume] [STEPS="prefill decode tiles merge"] bash tools/perf/retune_host_launch.sh
# Session 32 re-ran it for the W8A8 candidates alone after their quantizer's config moved to
# kernels_triton/act_quant_config.py (no executed code changed for them):
#   ONLY_PREFILL="triton.w8a8_gemm,torch.scaled_mm_*" PREFILL_FORMATS=fp8_block,fp8_tensor,fp8_row:fp8 OUT=dir bash ...
# Only the candidates whose sources changed are re-measured (--only), each with its first config and the config the
# table chose (--keep-configs): the other candidates' code and times did not change, and they lost to the stale winner.
#   prefill  M = 64..4096, every format (160 keys), budget PREFILL_BUDGET (400 s);
#   decode   the stale decode keys: W8A8 at M = 16, fp8_tensor at M = 4 (budget DECODE_BUDGET, 150 s);
#   tiles    the same decode keys on weights with decode tiles (the decode-tiles table's stale entries; with the tiled
#            W8A8 GEMV, see below);
#   merge    merge_tables --drop-stale for both tables (refuses if a stale key was not re-tuned).
# An autotune that runs out of budget resumes from its journal: pass the returned work directory as WORK.
# Returned: $OUT/nvidia_h200.yaml, $OUT/nvidia_h200_decode_tiles.yaml (when merged) and $OUT/retune.tgz (the work dir).
source "$(dirname "$0")/device_env.sh"; DEST=$OUT
WORK=${WORK:-$(mktemp -d)}; mkdir -p "$WORK"
STEPS=${STEPS:-prefill decode tiles merge}
ONLY_PREFILL=${ONLY_PREFILL:-"triton.w8a16_gemm,triton.w8a8_gemm,torch.scaled_mm_*,cuda.w8a16_gemm_wgmma"}
ONLY_DECODE="triton.w8a8_gemm,torch.scaled_mm_*"
AT="python3 -m tools.autotune --no-bf16 --top-k 2 --retune --max-configs 1"
t0=$(date +%s)
has() { [[ " $STEPS " == *" $1 "* ]]; }
if has prefill; then
  $AT --keep-configs tuning_db/nvidia_h200.yaml --only "$ONLY_PREFILL" --shapes baseline --m 64,256,1024,4096 \
    --formats "${PREFILL_FORMATS:-fp8_block,fp8_tensor,fp8_row,mxfp8,fp8_row:fp8}" --budget-s "${PREFILL_BUDGET:-400}" \
    --table "$WORK/t_prefill.yaml" --out "$WORK/at_prefill" > "$WORK/at_prefill.log" 2>&1
  echo "prefill autotune rc=$? $(( $(date +%s) - t0 )) s: $(grep -c '"status": "ok"' "$WORK/at_prefill/journal.jsonl") ok records"
  tail -2 "$WORK/at_prefill.log"
fi
decode() {  # $1: extra autotune flags, $2: keep table, $3: name, $4: candidates
  $AT --keep-configs "$2" --only "$4" $1 --shapes baseline --m 16 --formats fp8_block,fp8_tensor,fp8_row:fp8 \
    --budget-s "${DECODE_BUDGET:-150}" --table "$WORK/t_$3.yaml" --out "$WORK/at_$3_16" > "$WORK/at_$3_16.log" 2>&1
  echo "$3 M=16 autotune rc=$? $(( $(date +%s) - t0 )) s"; tail -1 "$WORK/at_$3_16.log"
  $AT --keep-configs "$2" --only "$4" $1 --shapes baseline --m 4 --formats fp8_tensor \
    --budget-s "${DECODE_BUDGET:-150}" --table "$WORK/t_$3.yaml" --out "$WORK/at_$3_4" > "$WORK/at_$3_4.log" 2>&1
  echo "$3 M=4 autotune rc=$? $(( $(date +%s) - t0 )) s"; tail -1 "$WORK/at_$3_4.log"
}
has decode && decode "" tuning_db/nvidia_h200.yaml decode "$ONLY_DECODE"
# On weights with decode tiles the autotune skips a problem where no candidate it runs reads the tiles: the tiled W8A8
# GEMV runs too (its first config and the table's; unchanged code, so where it wins it re-measures a current entry).
has tiles && decode "--decode-tiles" tuning_db/nvidia_h200_decode_tiles.yaml tiles "$ONLY_DECODE,cuda.w8a8_gemv_tiles"
if has merge; then
  mkdir -p "$WORK/tables"
  python3 -m tools.perf.merge_tables tuning_db/nvidia_h200.yaml "$WORK/t_prefill.yaml" "$WORK/t_decode.yaml" \
    --drop-stale --out "$WORK/tables/nvidia_h200.yaml" 2>&1 | tail -4
  python3 -m tools.perf.merge_tables tuning_db/nvidia_h200_decode_tiles.yaml "$WORK/t_tiles.yaml" \
    --drop-stale --out "$WORK/tables/nvidia_h200_decode_tiles.yaml" 2>&1 | tail -4
  cp "$WORK"/tables/*.yaml "$DEST/" 2>/dev/null
fi
tar czf "$DEST/retune.tgz" -C "$WORK" .
echo "retune done $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# The Triton decode kernels alone on the H200 (session 11): every config of triton.w8a16_gemv / triton.w8a8_gemv on
# the 8 baseline shapes x 5 format/acts x M = 1, 4, 16, verified then timed (graph replay, rotating weights), with
# bf16 F.linear timed per problem. Measurement only: a scratch table, the shipped one untouched. Their last
# measurement before this was session 3's (docs/perf/h200_candidates_2026-11-29_s3.json).
#   OUT=dir bash tools/perf/measure_triton_gemv.sh     -> $OUT/triton_gemv.tgz (journal, summary)
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
t0=$(date +%s)
timeout ${AUTOTUNE_TIMEOUT:-480} python3 -m tools.autotune --shapes baseline --m ${GEMV_M:-1,4,16} \
  --formats fp8_block,fp8_tensor,fp8_row:bf16,fp8_row:fp8,mxfp8 --only triton.w8a16_gemv,triton.w8a8_gemv \
  --top-k 2 --table "$W/scratch.yaml" --out "$W/at" > "$W/at.log" 2>&1
echo "autotune rc=$? $(( $(date +%s) - t0 )) s"; tail -4 "$W/at.log"
tar czf "$OUT/triton_gemv.tgz" -C "$W" .

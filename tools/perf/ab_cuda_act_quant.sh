#!/usr/bin/env bash
# Session 19: the CUDA activation quantizer's single-read register paths (act_quant.cu, FP8D_ACTQ_SINGLE_READ), one
# call (~7 min):   OUT=dir [RETUNE_IF=0.99] [GEMV_CONFIGS=4] [BENCH=0] bash tools/perf/ab_cuda_act_quant.sh
# 1. the CUDA kernels' GPU tests (the quantizer's bit identity, misaligned x, the GEMVs, the programmatic chain);
# 2. python -m tools.perf.ab_pdl --family cuda_act_quant: the CUDA W8A8 GEMV route with the quantizer compiled
#    with and without the single-read paths, M = 1, 4, 16, the three W8A8 formats, 7 baseline shapes;
# 3. only if that A/B's geomean (on / off) is below RETUNE_IF: every candidate on every W8A8 decode key (M = 1, 4,
#    16; the edit staled the cuda.w8a8_gemv entries), the CUDA GEMV with GEMV_CONFIGS configs plus the shipped one,
#    merge_tables --drop-stale, and the W8A8 decode bench on the merged table.
# Returned (at most 8 files): env.txt, summary.txt, nvidia_h200.yaml (step 3), ab_cuda_act_quant.tgz (logs, data).
source "$(dirname "$0")/device_env.sh"; DEST=$OUT; W=$(mktemp -d); fp8d_record_env "$DEST/env.txt" > /dev/null
t0=$(date +%s)
{
timeout ${PRECOMPILE_TIMEOUT:-90} python3 -m tools.perf.precompile_cuda > "$W/precompile.log" 2>&1
echo "precompile rc=$? $(( $(date +%s) - t0 )) s"
timeout ${TEST_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider -n ${TEST_PROCS:-8} --timeout=140 \
  tests/test_cuda_kernels.py > "$W/gpu_tests.log" 2>&1
echo "tests rc=$? $(( $(date +%s) - t0 )) s: $(tail -1 "$W/gpu_tests.log")"; grep -E "^(FAILED|ERROR)" "$W/gpu_tests.log" | head
timeout ${AB_TIMEOUT:-150} python3 -m tools.perf.ab_pdl --family cuda_act_quant --m 1,4,16 \
  --formats fp8_tensor/fp8,fp8_row/fp8,fp8_block/fp8 \
  --shapes 6144x4096,4096x4096,28672x4096,4096x14336,8192x8192,6656x2560,8192x2560 --rounds 2 --out "$W/ab.jsonl" \
  > "$W/ab.log" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
geo=$(python3 - "$W/ab.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
r = [x["us"]["on"] / x["us"]["off"] for x in rows]
print(f"{math.exp(sum(map(math.log, r)) / len(r)):.4f}" if r else "9")
for fmt in ("fp8_tensor", "fp8_row", "fp8_block"):
    for m in (1, 4, 16):
        q = [x["us"]["on"] / x["us"]["off"] for x in rows if x["fmt"] == fmt and x["m"] == m]
        if q:
            print(f"  {fmt} M={m}: geomean {math.exp(sum(map(math.log, q)) / len(q)):.3f} min {min(q):.3f} max {max(q):.3f}",
                  file=sys.stderr)
PY
)
echo "A/B on/off geomean: $geo"
if python3 -c "import sys; sys.exit(0 if float('$geo') < float('${RETUNE_IF:-0.99}') else 1)"; then
  timeout ${RETUNE_TIMEOUT:-230} python3 -m tools.autotune --no-bf16 --top-k 2 --retune --keep-configs tuning_db/nvidia_h200.yaml \
    --shapes baseline --m 1,4,16 --formats fp8_block:fp8,fp8_row:fp8,fp8_tensor:fp8 --max-configs 3 \
    --max-configs-for cuda.w8a8_gemv=${GEMV_CONFIGS:-4} --table "$W/t_decode_w8a8.yaml" --out "$W/at_decode_w8a8" \
    > "$W/at_decode_w8a8.log" 2>&1
  echo "retune rc=$? $(( $(date +%s) - t0 )) s"; tail -2 "$W/at_decode_w8a8.log"
  mkdir -p "$W/tables"
  python3 -m tools.perf.merge_tables tuning_db/nvidia_h200.yaml "$W/t_decode_w8a8.yaml" --drop-stale \
    --out "$W/tables/nvidia_h200.yaml" 2>&1 | tail -3
  cp "$W/tables/nvidia_h200.yaml" "$DEST/" 2>/dev/null
  [ "${BENCH:-1}" = 1 ] && timeout ${BENCH_TIMEOUT:-120} python3 -m tools.bench --what main --shapes baseline --m 1,4,16 \
    --formats fp8_block,fp8_tensor,fp8_row:fp8 --no-candidates --tables "$W/tables" --budget-s 80 --out "$W/bench" \
    > "$W/bench.log" 2>&1
  [ "${BENCH:-1}" = 1 ] && echo "bench rc=$? $(( $(date +%s) - t0 )) s" && grep -A8 "^| target" "$W/bench.log" | head -8
fi
} 2>&1 | tee "$DEST/summary.txt"
tar czf "$DEST/ab_cuda_act_quant.tgz" -C "$W" .

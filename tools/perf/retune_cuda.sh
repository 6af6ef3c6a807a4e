#!/usr/bin/env bash
# Re-tune after a change to the sources the CUDA candidates hash (kernels_cuda/csrc/*, _launch.py, _driver.py,
# compiler.py, configs.py: every cuda.* table entry goes stale), then bench the decode cells of the merged table.
#   OUT=dir [STEP=all|decode|finish] [T_DECODE=table] [GEMV_CONFIGS=0] [TRITON_GEMV64=1] bash tools/perf/retune_cuda.sh
# Knobs: DECODE_ONLY (autotune --only for step 1, e.g. the candidates that hold decode keys), DEQUANT_FORMATS (mxfp8),
# DEQUANT_M (256,1024,4096), TILES=1 (also the table tuned on decode tiles, from scratch: tools/perf/tiles_tables.sh,
# returned as $OUT/nvidia_h200_decode_tiles.yaml), TEST_PROCS (14), DQ_PERF=0 (skips step 6), DEQUANT=0 (skips step 2:
# an edit that left the dequant kernel's images as they were, session 24).
# 1. EVERY candidate on the decode keys (M = 1, 4, 16: where the CUDA GEMVs compete), old winners retried; the
#    CUDA GEMVs (the two-launch W8A8 and W8A16 ones and the W8A8 one that quantizes x in its loop) with GEMV_CONFIGS configs each (0, the default: every config, staged rings included), the others
#    with DECODE_CONFIGS (2);
# 2. cuda.dequant_cublas alone on its mxfp8 keys at M = 256..4096, DEQUANT_CONFIGS_N (4: all) of its configs (the
#    other candidates there hash no CUDA source, so their old times still compare);
# 3. with TRITON_GEMV64=1 (session 4: kernels_triton/configs.py changed too) every candidate on the one Triton
#    GEMV key (fp8_row 128256x4096, M = 64);
# 4. merge_tables --drop-stale (refuses if a dropped key was not re-tuned), 5. the bench at M = 1, 4, 16,
# (BENCH=0 skips 5), 6. the dequant kernel alone against the copy rate of the same run (python -m kernels_cuda.perf --dequant).
# First every CUDA kernel module is compiled on all cores (tools/perf/precompile_cuda.py).
# STEP=all and STEP=decode first run the CUDA kernel GPU tests (TESTS=0 skips them); STEP=decode then step 1 only;
# STEP=finish runs steps 2-6 on the decode table T_DECODE of an earlier STEP=decode call (carried into the checkout).
# Returned: $OUT/nvidia_h200.yaml (the merged table; STEP=decode: $OUT/t_decode.yaml) and $OUT/retune.tgz
# (everything; the device tool returns a limited number of files, so the work happens in a temporary directory).
source "$(dirname "$0")/device_env.sh"; DEST=$OUT; OUT=$(mktemp -d); mkdir -p "$OUT/tables"; fp8d_record_env "$OUT/env.txt" > /dev/null
STEP=${STEP:-all}
AT="python3 -m tools.autotune --no-bf16 --top-k 2 --retune --keep-configs tuning_db/nvidia_h200.yaml"
t0=$(date +%s); tables=("$OUT/t_decode.yaml" "$OUT/t_dequant.yaml")
timeout ${PRECOMPILE_TIMEOUT:-120} python3 -m tools.perf.precompile_cuda --paths ${PRECOMPILE_PATHS:-native,sm80,emulated} > "$OUT/precompile.log" 2>&1
echo "precompile rc=$? $(( $(date +%s) - t0 )) s: $(tail -1 "$OUT/precompile.log")"
if [ "$STEP" != finish ]; then
  if [ "${TESTS:-1}" = 1 ]; then
    TEST_PROCS=${TEST_PROCS:-14} fp8d_pytest "$OUT/gpu_tests.log" ${TEST_TIMEOUT:-240} tests/test_cuda_kernels.py
  fi
  $AT --shapes baseline --m 1,4,16 --formats fp8_block,fp8_tensor,fp8_row,mxfp8,fp8_row:fp8 --max-configs ${DECODE_CONFIGS:-2} \
    ${DECODE_ONLY:+--only "$DECODE_ONLY"} \
    --max-configs-for cuda.w8a16_gemv=${GEMV_CONFIGS:-0} cuda.w8a8_gemv=${GEMV_CONFIGS:-0} \
    cuda.w8a8_gemv_inline=${GEMV_CONFIGS:-0} \
    --budget-s ${DECODE_BUDGET:-420} --table "$OUT/t_decode.yaml" --out "$OUT/at_decode" > "$OUT/at_decode.log" 2>&1
  echo "decode autotune rc=$? $(( $(date +%s) - t0 )) s"; tail -3 "$OUT/at_decode.log"
  if [ "$STEP" = decode ]; then
    cp "$OUT/t_decode.yaml" "$DEST/"; tar czf "$DEST/retune.tgz" -C "$OUT" .; exit 0
  fi
else
  cp "${T_DECODE:?STEP=finish needs T_DECODE, the table of a STEP=decode call}" "$OUT/t_decode.yaml"
fi
if [ "${DEQUANT:-1}" = 1 ]; then
  $AT --shapes baseline --m ${DEQUANT_M:-256,1024,4096} --formats ${DEQUANT_FORMATS:-mxfp8} --only cuda.dequant_cublas \
    --max-configs ${DEQUANT_CONFIGS_N:-4} \
    --table "$OUT/t_dequant.yaml" --out "$OUT/at_dequant" > "$OUT/at_dequant.log" 2>&1
  echo "dequant autotune rc=$? $(( $(date +%s) - t0 )) s"
else
  tables=("$OUT/t_decode.yaml")
fi
if [ "${TRITON_GEMV64:-0}" = 1 ]; then
  $AT --shapes 128256x4096 --m 64 --formats fp8_row --max-configs 3 --table "$OUT/t_gemv64.yaml" --out "$OUT/at_gemv64" \
    > "$OUT/at_gemv64.log" 2>&1; echo "gemv M=64 autotune rc=$? $(( $(date +%s) - t0 )) s"; tables+=("$OUT/t_gemv64.yaml")
fi
python3 -m tools.perf.merge_tables tuning_db/nvidia_h200.yaml "${tables[@]}" --drop-stale \
  --out "$OUT/tables/nvidia_h200.yaml" 2>&1 | tail -8 | tee "$OUT/merge.log"
cp "$OUT/tables/nvidia_h200.yaml" "$DEST/" 2>/dev/null  # now, so a run cut short in the bench still returns it
if [ "${TILES:-0}" = 1 ]; then
  mkdir -p "$OUT/tiles"; OUT="$OUT/tiles" TESTS=0 BENCH=0 bash "$(dirname "$0")/tiles_tables.sh" > "$OUT/tiles.log" 2>&1
  echo "tiles table rc=$? $(( $(date +%s) - t0 )) s"; tail -3 "$OUT/tiles.log"
  cp "$OUT/tiles/nvidia_h200_decode_tiles.yaml" "$DEST/" 2>/dev/null
fi
if [ "${BENCH:-1}" = 1 ]; then
  python3 -m tools.bench --what main,overhead --shapes baseline --m 1,4,16 --formats fp8_block,fp8_tensor,fp8_row,mxfp8 \
    --no-candidates --tables "$OUT/tables" --budget-s ${BENCH_BUDGET:-100} --out "$OUT/bench" > "$OUT/bench.log" 2>&1
  echo "bench rc=$? $(( $(date +%s) - t0 )) s"
  tail -30 "$OUT/bench.log"
fi
cp "$OUT/tables/nvidia_h200.yaml" "$DEST/" 2>/dev/null; tar czf "$DEST/retune.tgz" -C "$OUT" .
if [ "${DQ_PERF:-1}" = 1 ]; then
  timeout ${DQ_PERF_TIMEOUT:-100} python3 -m kernels_cuda.perf --dequant > "$OUT/dequant_perf.log" 2>&1
  echo "dequant perf rc=$? $(( $(date +%s) - t0 )) s"; tail -40 "$OUT/dequant_perf.log"
  cp "$OUT/tables/nvidia_h200.yaml" "$DEST/" 2>/dev/null; tar czf "$DEST/retune.tgz" -C "$OUT" .
fi

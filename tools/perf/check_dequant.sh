#!/usr/bin/env bash
# After a change to kernels_cuda/csrc/dequant.cu alone (only the cuda.dequant_cublas entries go stale), one call:
#   OUT=dir bash tools/perf/check_dequant.sh
# 1. every CUDA module compiled up front (tools/perf/precompile_cuda.py); 2. the dequant kernel alone, every config
# x format x shape, against the copy rate of the same run and torch's own fp8 -> bf16 conversion
# (python -m kernels_cuda.perf --dequant); 3. cuda.dequant_cublas re-tuned on its mxfp8 keys (M = 256..4096, every
# config) and merged into the shipped table (merge_tables --drop-stale) -> $OUT/nvidia_h200.yaml; 4. with that
# table in tuning_db/, tools/perf/check_decode.sh (the CUDA and dispatcher GPU tests, the untabled shapes).
source "$(dirname "$0")/device_env.sh"; DEST=$OUT; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
t0=$(date +%s)
timeout ${PRECOMPILE_TIMEOUT:-120} python3 -m tools.perf.precompile_cuda > "$W/precompile.log" 2>&1
echo "precompile rc=$? $(( $(date +%s) - t0 )) s: $(tail -1 "$W/precompile.log")"
timeout ${DQ_PERF_TIMEOUT:-120} python3 -m kernels_cuda.perf --dequant > "$W/dequant_perf.log" 2>&1
echo "dequant perf rc=$? $(( $(date +%s) - t0 )) s"; tail -38 "$W/dequant_perf.log"
python3 -m tools.autotune --no-bf16 --top-k 2 --retune --keep-configs tuning_db/nvidia_h200.yaml --shapes baseline \
  --m 256,1024,4096 --formats mxfp8 --only cuda.dequant_cublas --max-configs 0 --table "$W/t_dequant.yaml" \
  --out "$W/at_dequant" > "$W/at_dequant.log" 2>&1
echo "dequant autotune rc=$? $(( $(date +%s) - t0 )) s"; tail -2 "$W/at_dequant.log"
python3 -m tools.perf.merge_tables tuning_db/nvidia_h200.yaml "$W/t_dequant.yaml" --drop-stale \
  --out "$W/nvidia_h200.yaml" 2>&1 | tail -4 | tee "$W/merge.log"
cp "$W/nvidia_h200.yaml" "$DEST/" && cp "$W/nvidia_h200.yaml" tuning_db/nvidia_h200.yaml
tar czf "$DEST/check_dequant.tgz" -C "$W" .
OUT=$DEST bash tools/perf/check_decode.sh

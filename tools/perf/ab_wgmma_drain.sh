#!/usr/bin/env bash
# What the W8A16 GEMM's WGMMA_DRAIN (the fix of the register-wgmma race, dispatch.isa.wgmma_register_hazards)
# costs, on the lent GPU, one call:
#   OUT=dir bash tools/perf/ab_wgmma_drain.sh
# 1. the W8A16 GEMM GPU tests, the race regression test included;
# 2. the autotune of triton.w8a16_gemm alone on fp8_row / fp8_block / mxfp8 (bf16 x), baseline shapes, drained (as
#    shipped) and undrained (kernels_triton._gemm_launch.wgmma_drain patched to False in this script's process
#    only: there is no switch to ship the race), counting the configs each pass rejects as wrong;
# 3. the per-cell ratio of the best times (tools.perf.table_ab). Everything lands in $OUT/ab_wgmma_drain.tgz.
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-gpu}
t0=$(date +%s)
fp8d_pytest "$W/gpu_tests.log" ${TEST_TIMEOUT:-150} tests/test_triton_gemm_gpu.py -k w8a16
for drain in 1 0; do
  timeout ${AT_TIMEOUT:-200} python3 - "$drain" "$W" <<'PY' > "$W/at_drain$drain.log" 2>&1
import sys
import kernels_triton._gemm_launch as launch
from tools import autotune
drain, w = sys.argv[1], sys.argv[2]
if drain == "0":
    launch.wgmma_drain = lambda device, dot_f32: False
import os
ms = os.environ.get("MS", "64,256,1024,4096")
sys.exit(autotune.main(["--no-supervise", "--no-bf16", "--top-k", "1", "--shapes", "baseline", "--m", ms,
                        "--formats", "fp8_row:bf16,fp8_block:bf16,mxfp8:bf16", "--only", "triton.w8a16_gemm",
                        "--max-configs", os.environ.get("CONFIGS", "6"), "--table", f"{w}/t_drain{drain}.yaml",
                        "--out", f"{w}/at_drain{drain}"]))
PY
  echo "autotune drain=$drain rc=$? $(( $(date +%s) - t0 )) s; rejected as wrong: $(grep -c '"status": "failed"' "$W/at_drain$drain/journal.jsonl" 2>/dev/null)"
done
python3 -m tools.perf.table_ab "$W/t_drain0.yaml" "$W/t_drain1.yaml" --labels undrained,drained   # < 1: the drain costs
tar czf "$OUT/ab_wgmma_drain.tgz" -C "$W" .

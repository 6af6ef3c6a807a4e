#!/usr/bin/env bash
# What the W8A16 GEMM's WGMMA_DRAIN (the fix of the register-wgmma race, dispatch.isa.wgmma_register_hazards)
# costs, on the lent GPU, one call:
#   OUT=dir bash tools/perf/ab_wgmma_drain.sh
# 1. the W8A16 GEMM GPU tests, the race regression test included;
# 2. the autotune of triton.w8a16_gemm alone on fp8_row / fp8_block / mxfp8 (bf16 x), baseline shapes, drained (as
#    shipped) and undrained (kernels_triton._gemm_launch.wgmma_drain patched to False in this script's process
#    only: there is no switch to ship the race), counting the configs each pass rejects as wrong;
# 3. the per-cell ratio of the best times. Everything lands in $OUT/ab_wgmma_drain.tgz.
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-gpu}
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider -n ${TEST_PROCS:-8} --timeout=140 \
  tests/test_triton_gemm_gpu.py -k "w8a16" > "$W/gpu_tests.log" 2>&1
echo "tests rc=$? $(( $(date +%s) - t0 )) s: $(tail -1 "$W/gpu_tests.log")"; grep -E "^(FAILED|ERROR)" "$W/gpu_tests.log" | head
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
python3 - "$W" <<'PY'
import sys, yaml, math
w = sys.argv[1]
t = [{(e["format"], e["n"], e["k"], e["m_bucket"]): e["us"] for e in yaml.safe_load(open(f"{w}/t_drain{i}.yaml"))["entries"]}
     for i in (0, 1)]
keys = sorted(set(t[0]) & set(t[1]))
r = [t[1][k] / t[0][k] for k in keys]
for k, v in zip(keys, r):
    print(f"{k[0]:>10} {k[1]:>6}x{k[2]:<6} M={k[3]:<5} undrained {t[0][k]:9.1f} us  drained {t[1][k]:9.1f} us  cost {v:5.2f}x")
if r:
    print(f"geomean time ratio drained / undrained: {math.exp(sum(map(math.log, r)) / len(r)):.3f} over {len(r)} cells")
PY
tar czf "$OUT/ab_wgmma_drain.tgz" -C "$W" .

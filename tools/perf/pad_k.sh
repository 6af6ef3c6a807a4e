#!/usr/bin/env bash
# Session 21: the pad.k16 route (dispatch/pad_k.py) for K % 16 != 0, one call (~5 min):
#   OUT=dir bash tools/perf/pad_k.sh
# 1. its GPU tests (every format/act: the padded problem's bits, the reference, a CUDA graph);
# 2. the pad launch alone (F.pad of a bf16 x [M, 1000] -> [M, 1008]), graph replay: the heuristic's PAD_US;
# 3. tools.bench --what untabled on 3000x1000 (not in any table) at M = 1, 16, 256, 4096 for the five format/acts:
#    every candidate (pad.k16 among them) autotuned, against the fallback chain's pick and bf16.
# Returned: env.txt, summary.txt, pad_k.tgz (logs, journals, the bench report).
source "$(dirname "$0")/device_env.sh"; DEST=$OUT; W=$(mktemp -d); fp8d_record_env "$DEST/env.txt" > /dev/null
t0=$(date +%s)
{
timeout ${PRECOMPILE_TIMEOUT:-90} python3 -m tools.perf.precompile_cuda --paths native > "$W/precompile.log" 2>&1
echo "precompile rc=$? $(( $(date +%s) - t0 )) s"
TEST_PROCS=${TEST_PROCS:-8} fp8d_pytest "$W/gpu_tests.log" ${TEST_TIMEOUT:-120} tests/test_dispatch_gpu.py -k pad_k16
timeout 60 python3 - > "$W/pad_alone.log" 2>&1 <<'PY'
import torch
from tools.perf.timing import CudaTimer, TimingPolicy, warm_gpu
warm_gpu(0.5)
t = CudaTimer()
for m in (1, 16, 256, 4096):
    xs = [torch.randn(m, 1000, device="cuda", dtype=torch.bfloat16) for _ in range(8)]
    r = t.time(lambda i: torch.nn.functional.pad(xs[i], (0, 8)), 8, TimingPolicy(replays=7))
    print(f"pad [{m}, 1000] -> [{m}, 1008] bf16: {r.us:.2f} us graph, {r.eager_us:.2f} us eager")
PY
cat "$W/pad_alone.log"
timeout ${BENCH_TIMEOUT:-330} python3 -m tools.bench --what untabled --untabled-shapes 3000x1000 --untabled-m 1,16,256,4096 \
  --formats fp8_block,fp8_tensor,fp8_row,fp8_row:fp8,mxfp8 --untabled-max-configs ${CONFIGS:-2} --out "$W/bench" \
  > "$W/bench.log" 2>&1
echo "bench rc=$? $(( $(date +%s) - t0 )) s"; grep -B2 -A40 "ntabled" "$W/bench.log" | tail -45
} 2>&1 | tee "$DEST/summary.txt"
tar czf "$DEST/pad_k.tgz" -C "$W" .

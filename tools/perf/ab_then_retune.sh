#!/usr/bin/env bash
# Session 5's fourth to sixth H200 calls (2026-11-29): A/B of a decode change against BASE (tools/perf/ab_decode.sh plus the
# activation quantizers alone, tools.perf.act_quant, in both trees), then -- only if the change helped -- the CUDA
# re-tune and decode bench (tools/perf/retune_cuda.sh), so one call (one machine start) serves both.
#   BASE=.gpu/base OUT=dir [GATE_ROUTE=fp8_tensor:fp8] [GATE_M=1] [GATE_MAX=0.98] bash tools/perf/ab_then_retune.sh
# Gate: geometric mean of new/base time over the GATE_ROUTE rows at M = GATE_M must be <= GATE_MAX.
source "$(dirname "$0")/device_env.sh"
BASE=$(cd "${BASE:?set BASE to the base checkout}" && pwd); DEST=$OUT; W=$(mktemp -d)
for side in base new; do
  dir=$PWD; cache=$FP8DISPATCH_CACHE_DIR; [ $side = base ] && dir=$BASE && cache=/tmp/fp8d-base-cache
  (cd "$dir" && PYTHONPATH="$dir" FP8DISPATCH_CACHE_DIR=$cache timeout 120 python3 -m tools.perf.act_quant \
    --shapes 1x4096,2x4096,4x4096,1x8192,16x4096 > "$W/act_quant_$side.log" 2>&1); echo "act_quant $side rc=$?"
done
OUT=$W/ab bash "$(dirname "$0")/ab_decode.sh" | tail -80
mkdir -p "$W/ab_x" && tar xzf "$W/ab/ab_decode.tgz" -C "$W/ab_x"
python3 - "$W/ab_x/ab_table.txt" "${GATE_ROUTE:-fp8_tensor:fp8}" "${GATE_M:-1}" "${GATE_MAX:-0.98}" <<'PY' > "$W/gate.txt"
import math, sys
table, route, m, gate = sys.argv[1], sys.argv[2].split(":"), sys.argv[3], float(sys.argv[4])
text = open(table).read().split("fp8_row x bf16")[0]
r = [float(f[7]) for f in (l.split("|")[1:-1] for l in text.splitlines() if l.startswith("| ") and not l.startswith("| N"))
     if f[2].strip() == route[0] and f[3].strip() == route[1] and f[4].strip() == m]
g = math.exp(sum(map(math.log, r)) / len(r)) if r else 9.9
print(f"gate: {len(r)} rows of {':'.join(route)} M={m}, geomean new/base {g:.3f} (pass <= {gate}) -> {'PASS' if g <= gate else 'FAIL'}")
PY
cat "$W/gate.txt"; grep -h "" "$W"/act_quant_*.log | grep -E "per_tensor|^x|shape" | head -30
tar czf "$DEST/ab.tgz" -C "$W" .
if grep -q PASS "$W/gate.txt"; then OUT=$DEST bash "$(dirname "$0")/retune_cuda.sh"; fi

#!/usr/bin/env bash
# A/B of the CUDA decode kernels against another checkout, same machine, one device call (session 5,
# 2026-11-29: act-quant trigger order and the MX scale folded into the decode):
#   BASE=.gpu/base OUT=dir bash tools/perf/ab_decode.sh      (BASE: `git archive` of the base commit, carried)
# 1. the CUDA kernel GPU tests of this tree; 2. kernels_cuda.perf in BASE, then here (PERF_ARGS), then the
# W8A16 fp8_row GEMV with fp16 against bf16 activations; 3. a table base -> new, printed last.
# Everything lands in $OUT/ab_decode.tgz (one file: the device tool returns a limited number of files).
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
BASE=$(cd "${BASE:?set BASE to the base checkout}" && pwd)
PERF_ARGS=${PERF_ARGS:---m 1,16 --routes mxfp8:bf16,fp8_block:fp8,fp8_tensor:fp8 --no-dequant}
t0=$(date +%s)
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout ${TEST_TIMEOUT:-240} python3 -m pytest -m gpu -q -p no:cacheprovider -n ${TEST_PROCS:-12} --timeout=200 \
    ${TESTS:-tests/test_cuda_kernels.py} > "$W/gpu_tests.log" 2>&1
  echo "tests rc=$? $(( $(date +%s) - t0 )) s: $(tail -1 "$W/gpu_tests.log")"; grep -E "^(FAILED|ERROR)" "$W/gpu_tests.log" | head -20
fi
(cd "$BASE" && PYTHONPATH="$BASE" FP8DISPATCH_CACHE_DIR=/tmp/fp8d-base-cache timeout 280 python3 -m kernels_cuda.perf $PERF_ARGS) \
  > "$W/perf_base.log" 2>&1; echo "perf base rc=$? $(( $(date +%s) - t0 )) s"
timeout 280 python3 -m kernels_cuda.perf $PERF_ARGS > "$W/perf_new.log" 2>&1; echo "perf new rc=$? $(( $(date +%s) - t0 )) s"
for xd in fp16 bf16; do
  timeout 150 python3 -m kernels_cuda.perf --x-dtype $xd --m 1,16 --routes fp8_row:bf16 --no-dequant ${F16_ARGS:-} \
    > "$W/perf_row_$xd.log" 2>&1; echo "perf fp8_row x=$xd rc=$? $(( $(date +%s) - t0 )) s"
done
python3 - "$W" <<'PY' | tee "$W/ab_table.txt"
import sys, pathlib
w = pathlib.Path(sys.argv[1])
def rows(name):
    out = {}
    for line in (w / name).read_text().splitlines():
        f = line.split()
        if len(f) == 9 and f[0].isdigit() and f[5].replace(".", "").isdigit():
            out[tuple(f[:5])] = (float(f[5]), f[6], float(f[7]))
    return out
for a, b, title in (("perf_base.log", "perf_new.log", "base -> new"), ("perf_row_bf16.log", "perf_row_fp16.log", "fp8_row x bf16 -> fp16")):
    ra, rb = rows(a), rows(b)
    print(f"\n{title}\n| N | K | fmt | act | M | us A | us B | B/A | % copy B | bf16 ref / B |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in ra:
        if key in rb:
            print(f"| {' | '.join(key)} | {ra[key][0]:.2f} | {rb[key][0]:.2f} | {rb[key][0] / ra[key][0]:.3f} | {rb[key][1]} | "
                  f"{rb[key][2] / rb[key][0]:.2f}x |")
PY
tar czf "$OUT/ab_decode.tgz" -C "$W" .

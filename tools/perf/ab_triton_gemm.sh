#!/usr/bin/env bash
# Same-run A/B of a Triton GEMM (or GEMV) change against BASE, on the lent GPU, one call: the autotune of the given
# Triton candidate(s) in the base tree and in this tree with the same arguments, then the per-cell ratio
# (tools.perf.table_ab).
#   git archive BASE_COMMIT | (mkdir -p .gpu/base && tar -x -C .gpu/base)      # here, before the call; carry .gpu/base
#   BASE=.gpu/base OUT=dir [FORMATS=mxfp8:bf16] [ONLY=triton.w8a16_gemm] [MS=64,256,1024,4096] [CONFIGS=6] \
#     [SHAPES=baseline] [TEST_FILES=tests/test_triton_gemm_gpu.py] bash tools/perf/ab_triton_gemm.sh
# The decode GEMVs: ONLY=triton.w8a16_gemv,triton.w8a8_gemv FORMATS=fp8_block,fp8_tensor,fp8_row:bf16,fp8_row:fp8,mxfp8
#   MS=1 CONFIGS=16 TEST_FILES="tests/test_triton_gemv.py -m gpu".
# The GPU tests run first, in this tree only (TESTS=0 skips them). Everything lands in $OUT/ab_triton_gemm.tgz;
# base/new > 1 means this tree is faster.
source "$(dirname "$0")/device_env.sh"
BASE=$(cd "${BASE:?set BASE to the base tree (git archive)}" && pwd); W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-gpu}
t0=$(date +%s)
if [ "${TESTS:-1}" = 1 ]; then
  fp8d_pytest "$W/gpu_tests.log" ${TEST_TIMEOUT:-200} ${TEST_FILES:-tests/test_triton_gemm_gpu.py}
fi
for side in base new; do
  dir=$PWD; [ $side = base ] && dir=$BASE
  (cd "$dir" && PYTHONPATH="$dir" timeout ${AT_TIMEOUT:-200} python3 -m tools.autotune --no-bf16 --top-k 1 --shapes "${SHAPES:-baseline}" \
    --m "${MS:-64,256,1024,4096}" --formats "${FORMATS:-mxfp8:bf16}" --only "${ONLY:-triton.w8a16_gemm}" \
    --max-configs "${CONFIGS:-6}" --table "$W/t_$side.yaml" --out "$W/at_$side" > "$W/at_$side.log" 2>&1)
  echo "autotune $side rc=$? $(( $(date +%s) - t0 )) s; rejected as wrong: $(grep -c '"status": "failed"' "$W/at_$side/journal.jsonl" 2>/dev/null)"
done
python3 -m tools.perf.table_ab "$W/t_base.yaml" "$W/t_new.yaml" --labels base,new
tar czf "$OUT/ab_triton_gemm.tgz" -C "$W" .

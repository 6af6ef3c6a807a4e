#!/usr/bin/env bash
# Session 13: programmatic dependent launch of the Triton GEMM chain (kernels_triton._pdl), one call (~6-8 min):
#   OUT=dir [AB_SHAPES=NxK,...] [AB_M=64,256] bash tools/perf/ab_pdl_triton.sh
# 1. the GPU tests of the changed kernels (Triton GEMMs, their split-K reduction, the activation quantizers, the
#    Triton GEMV that shares the last two) and of the dispatcher on the shipped table;
# 2. python -m tools.perf.ab_pdl: PDL off / wait only / on (and W8A8 with a plain quantizer), the table's Triton GEMM
#    config, the bench's workload and timing. Logs and data land in $OUT/ab_pdl.tgz.
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
t0=$(date +%s)
fp8d_pytest "$W/gpu_tests.log" ${TEST_TIMEOUT:-240} -m gpu tests/test_triton_gemm_gpu.py tests/test_triton_act_quant.py \
  tests/test_triton_gemv.py tests/test_dispatch_gpu.py
timeout ${AB_TIMEOUT:-300} python3 -m tools.perf.ab_pdl --m ${AB_M:-64,256} \
  --shapes ${AB_SHAPES:-6144x4096,4096x4096,28672x4096,4096x14336,8192x8192,6656x2560,8192x2560} --rounds 2 \
  --out "$W/ab_pdl.jsonl" > "$W/ab_pdl.log" 2>&1
echo "ab_pdl rc=$? $(( $(date +%s) - t0 )) s"; cat "$W/ab_pdl.log" | grep -v "^#" | tail -80
tar czf "$OUT/ab_pdl.tgz" -C "$W" .

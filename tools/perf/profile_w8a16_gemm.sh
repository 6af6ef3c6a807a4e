#!/usr/bin/env bash
# Nsight Compute on the Triton W8A16 GEMM (session 10, 2026-11-30): what limits it at M = 256 and 1024, where it
# reaches 0.5-0.8x of bf16 cuBLAS, and where two CTAs per SM (GemmConfig.maxnreg, exp/occupancy-twins) bought nothing.
# The same sections on bf16 F.linear for comparison.
#   OUT=dir bash tools/perf/profile_w8a16_gemm.sh      -> $OUT/profile_w8a16_gemm.tgz; the key lines on stdout
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
source tools/perf/ncu_common.sh
fp8d_ncu row_6144_m1024 _w8a16_gemm --m 1024 --config 128,128,64,8,4,1,0,1
fp8d_ncu row_6144_m256 _w8a16_gemm --m 256 --config 128,128,64,8,4,1,0,0
fp8d_ncu bf16_6144_m1024 "sm90|nvjet|gemm|xmma" --m 1024 --bf16
tar czf "$OUT/profile_w8a16_gemm.tgz" -C "$W" .

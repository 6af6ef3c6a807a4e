#!/usr/bin/env bash
# Nsight Compute on the Triton W8A16 GEMM at M = 64: mxfp8 against fp8_row with the same config (session 12 left
# this for the next session). At 64 token rows x 64 weight rows x 128 deep, 5 stages, no split, mxfp8 ran 1.5-1.7x
# fp8_row's time on 6656x2560 .. 28672x4096 (docs/perf/h200_probe_m64_2026-11-30_s12.jsonl), with 4 % more
# instructions in its sm_90 code and its exponent load's latency not the main cost (the rejected prefetch).
#   OUT=dir bash tools/perf/profile_mx_m64.sh      -> $OUT/profile_mx_m64.tgz; the key lines on stdout
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
NCU_EXTRA="--section SourceCounters" source tools/perf/ncu_common.sh
for fmt in fp8_row mxfp8; do
  fp8d_ncu ${fmt}_6656x2560_64x64 _w8a16_gemm --fmt $fmt --m 64 --n 6656 --k 2560 --config 64,64,128,4,5,1,1,1
  fp8d_ncu ${fmt}_6656x2560_64x128 _w8a16_gemm --fmt $fmt --m 64 --n 6656 --k 2560 --config 64,128,128,4,3,1,1,4
done
tar czf "$OUT/profile_mx_m64.tgz" -C "$W" .

#!/usr/bin/env bash
# Nsight Compute on the decode GEMVs at M = 16 against M = 1 (session 5, 2026-11-29): why W8A8 fp8_block costs
# ~3 us more at M = 16 than at M = 1 on 4096x4096 while W8A16 fp8_row costs ~1 us more.
#   OUT=dir bash tools/perf/profile_decode_m16.sh      -> $OUT/profile_decode_m16.tgz (one file)
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
NCU="ncu --section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats --section MemoryWorkloadAnalysis -s 2 -c 1"
run() {  # name kernel-regex args...
  local name=$1 kre=$2; shift 2
  timeout 120 $NCU -k regex:$kre python3 -m tools.perf.profile_gemv "$@" > "$W/$name.txt" 2>&1; echo "$name rc=$?"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issued Ipc Active|No Eligible|Memory Throughput|DRAM Throughput|Warp Cycles Per Issued" "$W/$name.txt" | head -12
}
run w8a8_block_4096_m16 fp8d_w8a8 --n 4096 --k 4096 --m 16 --fmt fp8_block --act fp8 --config 8,1,3
run w8a8_block_4096_m1 fp8d_w8a8 --n 4096 --k 4096 --m 1 --fmt fp8_block --act fp8 --config 8,1,2
run w8a16_row_4096_m16 fp8d_w8a16 --n 4096 --k 4096 --m 16 --fmt fp8_row --act bf16 --config 8,1,1
run act_quant_group_m16 fp8d_act_quant --n 4096 --k 4096 --m 16 --fmt fp8_block --act fp8 --config 8,1,3
run act_quant_tensor_m1 fp8d_act_quant --n 4096 --k 4096 --m 1 --fmt fp8_tensor --act fp8 --config 8,1,4
tar czf "$OUT/profile_decode_m16.tgz" -C "$W" .

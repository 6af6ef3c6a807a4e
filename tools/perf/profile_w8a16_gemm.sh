#!/usr/bin/env bash
# Nsight Compute on the Triton W8A16 GEMM (session 10, 2026-11-30): what limits it at M = 256 and 1024, where it
# reaches 0.5-0.8x of bf16 cuBLAS, and where two CTAs per SM (GemmConfig.maxnreg, exp/occupancy-twins) bought nothing.
# The same sections on bf16 F.linear for comparison.
#   OUT=dir bash tools/perf/profile_w8a16_gemm.sh      -> $OUT/profile_w8a16_gemm.tgz; the key lines on stdout
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
NCU="ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats --section Occupancy \
  --section LaunchStats --section InstructionStats -s 2 -c 1"
KEYS="Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Ipc Active|Issue Slots Busy|No Eligible|\
Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L1/TEX Cache Throughput|Warp Cycles Per Issued|Shared Memory|\
Bank Conflicts|Grid Size|Block Limit|Stall|Executed Ipc"
run() {  # name kernel-regex args...
  local name=$1 kre=$2; shift 2
  timeout ${NCU_TIMEOUT:-150} $NCU -k "regex:$kre" python3 -m tools.perf.profile_gemm "$@" > "$W/$name.txt" 2>&1
  echo "== $name rc=$?"; grep -E "$KEYS" "$W/$name.txt" | sed 's/  */ /g' | head -40
}
run row_6144_m1024 _w8a16_gemm --m 1024 --config 128,128,64,8,4,1,0,1
run row_6144_m256 _w8a16_gemm --m 256 --config 128,128,64,8,4,1,0,0
run bf16_6144_m1024 "sm90|nvjet|gemm|xmma" --m 1024 --bf16
tar czf "$OUT/profile_w8a16_gemm.tgz" -C "$W" .

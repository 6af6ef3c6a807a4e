# Sourced by the Nsight Compute scripts of the Triton GEMM (profile_w8a16_gemm.sh, profile_mx_m64.sh), after
# device_env.sh: fp8d_ncu NAME KERNEL-REGEX ARGS... profiles one launch of `python -m tools.perf.profile_gemm ARGS`
# (two warm-up launches skipped) into $W/NAME.txt and prints its key lines. NCU_EXTRA: more --section flags.
NCU="ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats --section Occupancy \
  --section LaunchStats --section InstructionStats ${NCU_EXTRA:-} -s 2 -c 1"
NCU_KEYS="Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Ipc Active|Issue Slots Busy|\
No Eligible|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L1/TEX Cache Throughput|Warp Cycles Per Issued|\
Shared Memory|Bank Conflicts|Grid Size|Block Limit|Stall|Executed Ipc"
fp8d_ncu() {
  local name=$1 kre=$2; shift 2
  timeout ${NCU_TIMEOUT:-150} $NCU -k "regex:$kre" python3 -m tools.perf.profile_gemm "$@" > "$W/$name.txt" 2>&1
  echo "== $name rc=$?"; grep -E "$NCU_KEYS" "$W/$name.txt" | sed 's/  */ /g' | head -40
}

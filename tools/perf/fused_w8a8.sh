#!/usr/bin/env bash
# Session 21: the one-launch W8A8 decode GEMV (cuda.w8a8_gemv_fq, kernels_cuda/_w8a8_fused.py), one call (~8 min):
#   OUT=dir [GEMV_CONFIGS=4] [BENCH=1] bash tools/perf/fused_w8a8.sh
# 1. the CUDA kernels' GPU tests (the one-launch GEMV bit-identical to the two-launch route on every path, in a graph
#    with programmatic launches; the rest of tests/test_cuda_kernels.py) and the dispatcher's GPU tests;
# 2. only if they pass: every candidate on every W8A8 decode key it serves (M = 1, 4: the new candidate serves M <= 8),
#    both CUDA GEMVs with GEMV_CONFIGS configs plus the shipped one, merged into the shipped table;
# 3. the W8A8 decode bench (M = 1, 4, 16) on the merged table.
# Since session 22 these steps live in tools/perf/persistent_gemv.sh (one copy of the flow); this runs it without its
# W8A16 probe. Returned (at most 8 files): env.txt, summary.txt, nvidia_h200.yaml (step 2), persistent_gemv.tgz (logs,
# journals, bench; session 21's archive was named fused_w8a8.tgz).
PROBE=0 FQ_CONFIGS=${GEMV_CONFIGS:-4} exec bash "$(dirname "$0")/persistent_gemv.sh"

#!/usr/bin/env bash
# Session 4's re-tune (2026-11-29) after the CUDA launcher gained programmatic dependent launches and
# kernels_triton/configs.py changed the Triton GEMV's tile rule: retune_cuda.sh with the Triton GEMV key.
#   OUT=dir bash tools/perf/retune_pdl.sh
TRITON_GEMV64=1 exec bash "$(dirname "$0")/retune_cuda.sh" "$@"

#!/usr/bin/env bash
# Issue 7's autotune-speed target on the lent machine: a model's worth (Llama-3-8B's 5 shapes x 7 M buckets x
# 4 formats = 140 problems) from a cold start (fresh machine: empty NVRTC and Triton caches), with the command
# docs/perf/h200_session2_2026-11-29.md gives, into a scratch table (the shipped one is not touched); then the
# dispatcher's GPU tests on the shipped table.     OUT=dir bash tools/perf/autotune_llama.sh
# Everything lands in $OUT/autotune_llama.tgz (one file: the device tool returns a limited number of files).
source "$(dirname "$0")/device_env.sh"; W=$(mktemp -d); fp8d_record_env "$W/env.txt" > /dev/null
t0=$(date +%s)
timeout ${AT_TIMEOUT:-480} python3 -m tools.autotune --hf-config tools/perf/models/llama-3-8b.json --m 1,4,16,64,256,1024,4096 \
  --formats fp8_block,fp8_tensor,fp8_row,mxfp8 --max-configs 3 --top-k 2 --table "$W/llama3_8b.yaml" --out "$W/at_llama" \
  ${AT_ARGS:-} > "$W/at_llama.log" 2>&1
echo "llama-3-8b autotune rc=$? wall $(( $(date +%s) - t0 )) s"; grep -E "entries written|problems|budget" "$W/at_llama.log" | tail -4
timeout ${TEST_TIMEOUT:-100} python3 -m pytest -m gpu -q -p no:cacheprovider -n ${TEST_PROCS:-12} --timeout=90 \
  ${TESTS:-tests/test_dispatch_gpu.py} > "$W/gpu_tests.log" 2>&1
echo "tests rc=$? $(( $(date +%s) - t0 )) s: $(tail -1 "$W/gpu_tests.log")"; grep -E "^(FAILED|ERROR)" "$W/gpu_tests.log" | head -20
tar czf "$OUT/autotune_llama.tgz" -C "$W" .

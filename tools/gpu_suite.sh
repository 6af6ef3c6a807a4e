#!/usr/bin/env bash
# Everything that needs the GPU, in one call (the lent H200 is reached in few, full calls):
#   bash tools/gpu_suite.sh [tests] [bench] [autotune] [quant] [acc-part0] [acc-part1] ...   (default: tests quant)
# acc-part0 / acc-part1: the SmolLM2 kernel-vs-reference check (docs/accuracy.md): the model export travels
# in two consecutive runs (each carries one of .cache/accuracy/part0, part1), staged in /tmp/fp8acc.
# Writes logs and results under ${OUT:-./gpu_out}; prints a short summary last.
source "$(dirname "$0")/perf/device_env.sh"
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-gpu}
stages=("$@"); [ ${#stages[@]} -eq 0 ] && stages=(tests quant)
fp8d_record_env "$OUT/env.txt"
summary=()
# Every CUDA kernel module the stages will load, compiled up front on all cores (tools/perf/precompile_cuda.py):
# first-launch compiles otherwise run one at a time inside the tests and the autotune.
t0=$(date +%s); timeout ${PRECOMPILE_TIMEOUT:-120} python3 -m tools.perf.precompile_cuda > "$OUT/precompile.log" 2>&1
summary+=("precompile rc=$? $(( $(date +%s) - t0 )) s")
for st in "${stages[@]}"; do
  t0=$(date +%s)
  case "$st" in
    tests)
      # All GPU tests at once; -n spreads them over processes (Triton compiles are CPU-bound), and each
      # test has its own time limit so one hang cannot eat the run.
      FP8DISPATCH_FAILURE_LOG="$OUT/gpu_failures.log" timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu -v -p no:cacheprovider -n ${TEST_PROCS:-12} \
        --timeout=${TEST_CASE_TIMEOUT:-150} --tb=short -rfE ${PYTEST_ARGS:-tests} > "$OUT/gpu_tests.log" 2>&1; rc=$?
      grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -60
      summary+=("tests rc=$rc: $(tail -1 "$OUT/gpu_tests.log")") ;;
    quant)
      timeout 240 python3 -m tools.bench --what quantizer --out "$OUT" > "$OUT/quant.log" 2>&1; rc=$?
      tail -15 "$OUT/quant.log"; summary+=("quant rc=$rc") ;;
    bench)
      timeout ${BENCH_TIMEOUT:-240} python3 -m tools.bench ${BENCH_ARGS:-} --out "$OUT/bench" > "$OUT/bench.log" 2>&1; rc=$?
      tail -50 "$OUT/bench.log"; summary+=("bench rc=$rc") ;;
    autotune)
      timeout ${AUTOTUNE_TIMEOUT:-300} python3 -m tools.autotune ${AUTOTUNE_ARGS:-} --table "$OUT/nvidia_h200.yaml" \
        --out "$OUT/autotune" > "$OUT/autotune.log" 2>&1; rc=$?
      tail -40 "$OUT/autotune.log"; summary+=("autotune rc=$rc") ;;
    acc-part0)
      mkdir -p /tmp/fp8acc && cp -r .cache/accuracy/part0 /tmp/fp8acc/; rc=$?; summary+=("acc-part0 staged rc=$rc") ;;
    acc-part1)
      cp -r .cache/accuracy/part1 /tmp/fp8acc/ && timeout ${ACC_TIMEOUT:-300} python3 -m tools.accuracy \
        --model-export /tmp/fp8acc --device cuda --dtype bf16 --check-kernels --noise-floor \
        --json "$OUT/accuracy_gpu.json" > "$OUT/accuracy_gpu.log" 2>&1; rc=$?
      tail -30 "$OUT/accuracy_gpu.log"; summary+=("accuracy check rc=$rc")
      # The W8A8 rows over more tokens: their kernel-vs-reference scatter is rounding noise (e4m3 activation
      # codes flipped by last-bit differences) of about one paired SE, 0.002-0.003 at 8192 tokens in bf16 and
      # in fp32 models alike (docs/accuracy.md, session 3); 8x the tokens shrinks it ~2.8x, below the 0.002
      # bound, so a remaining difference would be a kernel's. Session 4 (H200): all 6 rows within 0.002 (0.0004-0.0013).
      timeout ${ACC_TIMEOUT:-300} python3 -m tools.accuracy --model-export /tmp/fp8acc --device cuda --dtype bf16 \
        --tokens ${ACC_LONG_TOKENS:-65536} --variants fp8_block:fp8,fp8_tensor:fp8,fp8_row:fp8 --check-kernels \
        --noise-floor --json "$OUT/accuracy_gpu_w8a8_long.json" > "$OUT/accuracy_gpu_w8a8_long.log" 2>&1; rc=$?
      tail -12 "$OUT/accuracy_gpu_w8a8_long.log"; summary+=("accuracy check W8A8, ${ACC_LONG_TOKENS:-65536} tokens rc=$rc") ;;
    *) echo "unknown stage $st"; rc=2 ;;
  esac
  summary+=("  ($st took $(( $(date +%s) - t0 )) s)")
done
echo "=== summary"; printf '%s\n' "${summary[@]}"

"""Shared machinery of tools/autotune.py and tools/bench.py.

    timing.py   how a call is timed (GPU warm-up, CUDA-graph replay over weight copies that overflow L2, median)
    shapes.py   which linear shapes a model has (Hugging Face config.json, tensor parallelism)
    workload.py the tensors of one problem (weights with varied scales, copies, activations, references)
    verify.py   a candidate's output against dispatch.reference (failed candidates are never timed)
    journal.py  the per-measurement JSONL log that makes autotune resumable
    tuner.py    the autotune loop (pure logic; the timer and device are injected, so it runs on CPU in tests)
    routes.py   the bench's comparison routes (bf16 cuBLAS, torch._scaled_mm modes, GemLite)
    report.py   markdown / JSON / PNG output

Nothing here touches a device or the filesystem at import time.
"""

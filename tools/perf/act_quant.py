"""Activation quantization, backend by backend: device time (graph replay) and CPU time per call.

W8A8 timings include the activation quantization, so its cost decides prefill TFLOP/s (per-tensor: an amax
pass and a quantize pass) and part of decode latency (one more launch). This compares the fused kernels of
each backend (kernels_cuda, kernels_triton) and the torch-ops reference on the same inputs, and checks that
their codes and scales are bit-identical to dispatch.quantize_activation.

    python -m tools.perf.act_quant [--shapes 1x4096,16x4096,4096x4096,4096x14336] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import torch

import dispatch
from tools.perf.timing import QUICK, CudaTimer

GRANULARITIES = ("per_tensor", "per_token", "per_token_group_128")


def _routes():
    routes = {"torch": dispatch.quantize_activation}
    try:
        from kernels_cuda import _launch as cuda_launch

        if cuda_launch.gpu_unavailable_reason() is None:
            routes["cuda"] = cuda_launch.quantize_activation
    except Exception as e:  # noqa: BLE001 (report, keep the other routes)
        print(f"cuda route unavailable: {type(e).__name__}: {e}")
    try:
        import kernels_triton

        routes["triton"] = kernels_triton.quantize_activation
    except Exception as e:  # noqa: BLE001
        print(f"triton route unavailable: {type(e).__name__}: {e}")
    return routes


def _cpu_us(fn, iters: int = 200) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    dt = (time.perf_counter() - t0) / iters * 1e6
    torch.cuda.synchronize()
    return dt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="1x4096,16x4096,16x14336,4096x4096,4096x14336")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    timer = CudaTimer()
    routes = _routes()
    rows = []
    for shape in args.shapes.split(","):
        m, k = (int(v) for v in shape.lower().split("x"))
        xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 3 for _ in range(4)]
        for g in GRANULARITIES:
            want = dispatch.quantize_activation(xs[0], g)
            for name, fn in routes.items():
                codes, scales = fn(xs[0], g)
                same = bool(torch.equal(codes.view(torch.uint8), want[0].view(torch.uint8))
                            and torch.equal(scales.reshape(want[1].shape), want[1]))
                t = timer.time(lambda i, fn=fn, g=g: fn(xs[i], g), len(xs), QUICK)
                cpu = _cpu_us(lambda fn=fn, g=g: fn(xs[0], g))
                rows.append(dict(m=m, k=k, granularity=g, route=name, us=t.us, eager_us=t.eager_us,
                                 cpu_us_per_call=cpu, bit_identical=same,
                                 gbps=(m * k * 3) / t.us / 1e3 if t.us else None))
                print(f"{m}x{k} {g:22s} {name:7s} graph {t.us or float('nan'):8.2f} us  eager {t.eager_us:8.2f} us  "
                      f"cpu/call {cpu:7.1f} us  bits {'ok' if same else 'DIFFER'}", flush=True)
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "act_quant.json").write_text(json.dumps({
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, indent=1))
    return 0 if all(r["bit_identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

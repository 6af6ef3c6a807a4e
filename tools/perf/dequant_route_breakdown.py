"""Where cuda.dequant_cublas spends its time for fp8_row with bf16 in and out (kernels_cuda/_dequant_route.py),
against bf16 F.linear on the same shape, on the GPU:

  python -m tools.perf.dequant_route_breakdown [--shapes 4096x4096,28672x4096] [--m 1024,4096]

Each piece alone, timed as the tools time a linear call (tools/perf/timing.py: CUDA-graph replay over weight copies
rotating through > 3.3x L2, median): the codes through the dequant kernel, the bf16 GEMM on dequantized codes, the
in-place scale pass over the output (csrc/scale_cols.cu, and torch's y.mul_(scale) for comparison; one buffer:
L2-resident where it fits, as it is right after the GEMM that wrote it), the whole route, and bf16 F.linear. The
copies are sized for the bf16 weights. Columns in us; the last, bf16 / route.
"""

from __future__ import annotations

import argparse

import torch

import dispatch
from dispatch.formats import Format
from kernels_cuda import _dequant, _dequant_route

from .timing import FINAL, CudaTimer, RotationPolicy, l2_bytes, warm_gpu


def _shape(s: str) -> tuple[int, int]:
    n, k = s.lower().split("x")
    return int(n), int(k)


def _one_shape(n: int, k: int, ms: list[int], timer: CudaTimer, l2: int) -> None:
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    ncopies = RotationPolicy().copies(n * k * 2, l2)  # sized for the bf16 copies, the largest ones
    qws = [dispatch.quantize(w, Format.FP8_ROW, act="bf16") for _ in range(ncopies)]
    views = [_dequant_route._codes_view(q) for q in qws]
    codes = [_dequant.dequantize(v, torch.bfloat16) for v in views]
    wbf = [w.clone() for _ in range(ncopies)]
    for m in ms:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        scale = qws[0].scale

        def gemm(i: int) -> torch.Tensor:
            with _dequant_route.full_precision_reduction():  # as the route runs it
                return torch.mm(x, codes[i].t())

        calls = {
            "codes": lambda i: _dequant.dequantize(views[i], torch.bfloat16),
            "gemm": gemm,
            "scale": lambda i: _dequant_route.scale_columns_(y, scale),
            "mul_": lambda i: y.mul_(scale),
            "route": lambda i: _dequant_route.linear(x, qws[i], None, torch.bfloat16, None),
            "bf16": lambda i: torch.nn.functional.linear(x, wbf[i]),
        }
        us = {name: timer.time(call, ncopies, FINAL).best_us for name, call in calls.items()}
        print(f"{n:>6}x{k:<5} {m:>5} " + " ".join(f"{us[c]:8.1f}" for c in calls)
              + f" {us['bf16'] / us['route']:9.2f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4096x4096,6144x4096,28672x4096,8192x8192")
    ap.add_argument("--m", default="1024,4096")
    args = ap.parse_args(argv)
    timer, l2 = CudaTimer(), l2_bytes("cuda")
    warm_gpu(1.0)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; graph replay median, us")
    cols = ("codes", "gemm", "scale", "mul_", "route", "bf16")
    print(f"{'N x K':>12} {'M':>5} " + " ".join(f"{c:>8}" for c in cols) + f" {'bf16/route':>10}")
    for n, k in map(_shape, args.shapes.split(",")):
        _one_shape(n, k, [int(m) for m in args.m.split(",")], timer, l2)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

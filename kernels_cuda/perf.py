"""Roofline check of the CUDA kernels on the local GPU: `python -m kernels_cuda.perf [--quick]`.

Method (same as /work/shared/perf/h200_baseline.md): a CUDA graph of R calls rotating over enough weight
copies that each rotation reads > 3x the L2 (cold weights), replayed 15 times; median per call.
pct_copy = weight bytes (codes + scales; W8A8 includes its activation quantization launch in the time)
/ time / COPY_GBPS. The dequant kernel counts bytes read + written. bf16 cuBLAS (F.linear) is timed the
same way for the speedup column. This is a developer check; tools/bench is the project's benchmark.
"""

from __future__ import annotations

import argparse
import statistics

import torch

COPY_GBPS = 4275.0  # measured device-to-device copy on the H200 (read + write), baseline file
L2_BYTES = 60 * 2**20

BW_SHAPES = [(28672, 4096), (4096, 14336), (128256, 4096), (8192, 8192)]
SPEED_SHAPES = [(4096, 4096), (6144, 4096), (6656, 2560), (8192, 2560)]


def _graph_time_us(fns, reps: int = 15) -> float:
    torch.cuda.synchronize()
    for f in fns[:2]:
        f()  # compile + warm up outside the graph
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.cuda.graph(g, stream=s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / len(fns))
    return statistics.median(times)


def _copies(nbytes: int) -> int:
    return max(2, -(-3 * L2_BYTES // max(nbytes, 1)) + 1)


def main(argv=None) -> None:
    import dispatch
    from dispatch.formats import Act, Format

    from . import _launch

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="4 routes, 4 shapes, M = 1 (< 60 s on an H200)")
    args = ap.parse_args(argv)
    reason = _launch.gpu_unavailable_reason()
    if reason:
        raise SystemExit(f"kernels_cuda unavailable: {reason}")
    import time

    t0 = time.perf_counter()
    ms = [1] if args.quick else [1, 4, 16]
    routes = [(Format.FP8_ROW, "bf16"), (Format.MXFP8, "bf16"), (Format.FP8_TENSOR, "fp8"), (Format.FP8_BLOCK, "fp8")]
    if not args.quick:
        routes += [(Format.FP8_TENSOR, "bf16"), (Format.FP8_BLOCK, "bf16"), (Format.FP8_ROW, "fp8")]
    print(f"{'N':>7} {'K':>6} {'fmt':>10} {'act':>4} {'M':>3} {'us':>8} {'pct_copy':>8} {'bf16_us':>8} {'speedup':>7}")
    shapes = BW_SHAPES[:2] + SPEED_SHAPES[::3] if args.quick else BW_SHAPES + SPEED_SHAPES
    for n, k in shapes:
        w = torch.randn(n, k, device="cuda") * 0.02
        wb = w.to(torch.bfloat16)
        ncb = _copies(wb.numel() * 2)
        wbs = [wb.clone() for _ in range(ncb)]
        for fmt, act in routes:
            qw = dispatch.quantize(w, fmt, act=act)
            ncq = _copies(qw.nbytes)
            qws = [dispatch.QWeight(qw.format, qw.act, qw.qdata.clone(), qw.scale.clone()) for _ in range(ncq)]
            run = _launch.w8a16_gemv if qw.act is Act.BF16 else _launch.w8a8_gemv
            for m in ms:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                us = _graph_time_us([lambda q=q: run(x, q) for q in qws])
                bus = _graph_time_us([lambda b=b: torch.nn.functional.linear(x, b) for b in wbs])
                pct = qw.nbytes / (us * 1e-6) / (COPY_GBPS * 1e9) * 100
                print(f"{n:>7} {k:>6} {fmt.value:>10} {act:>4} {m:>3} {us:8.2f} {pct:7.1f}% {bus:8.2f} {bus / us:6.2f}x",
                      flush=True)
            if act == "bf16":
                us = _graph_time_us([lambda q=q: _launch.dequantize(q, torch.bfloat16) for q in qws])
                moved = qw.nbytes + 2 * n * k
                print(f"{n:>7} {k:>6} {fmt.value:>10} dequant->bf16 {us:8.2f} us "
                      f"{moved / (us * 1e-6) / (COPY_GBPS * 1e9) * 100:5.1f}% of copy BW (read+write)", flush=True)
            del qws
        del wbs
        torch.cuda.empty_cache()
    print(f"total {time.perf_counter() - t0:.1f} s (includes NVRTC compiles on a cold cache)")


if __name__ == "__main__":
    main()

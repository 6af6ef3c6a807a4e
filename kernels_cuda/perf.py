"""Roofline check of the CUDA kernels on the local GPU: `python -m kernels_cuda.perf [--quick]`.

Method (same as /work/shared/perf/h200_baseline.md, timed by tools/perf/timing.py, the project's one
timing implementation): a CUDA graph of one pass over enough weight copies that it reads > 3.3x the L2
(cold weights), replayed 15 times; median per call. pct_copy = weight bytes (codes + scales; W8A8
includes its activation quantization launch in the time) / time / COPY_GBPS. The dequant kernel counts
bytes read + written. bf16 cuBLAS (F.linear) is timed the same way for the speedup column. This is a
developer check run from a repository checkout (tools/ is not part of the installed package);
tools/bench is the project's benchmark.
"""

from __future__ import annotations

import argparse

import torch

COPY_GBPS = 4275.0  # measured device-to-device copy on the H200 (read + write), baseline file

BW_SHAPES = [(28672, 4096), (4096, 14336), (128256, 4096), (8192, 8192)]
SPEED_SHAPES = [(4096, 4096), (6144, 4096), (6656, 2560), (8192, 2560)]


def main(argv=None) -> None:
    import dispatch
    from dispatch.formats import Act, Format

    from . import _dequant, _launch

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="4 routes, 4 shapes, M = 1 (< 60 s on an H200)")
    ap.add_argument("--x-dtype", choices=("bf16", "fp16"), default="bf16",
                    help="activation dtype; fp16 times the W8A16 GEMVs' f16 path, whose decode is one hardware cvt "
                         "per pair on sm_89+ (the bf16 path needs four instructions): the first measurement of "
                         "the bf16 -> f16 idea in docs/perf/h200.md (mxfp8 is skipped: it takes bf16 only)")
    ap.add_argument("--m", default=None, help="comma-separated token counts (default 1,4,16; --quick: 1)")
    ap.add_argument("--routes", default=None,
                    help="comma-separated format:act pairs, e.g. mxfp8:bf16,fp8_block:fp8 (default: the 7 routes)")
    ap.add_argument("--shapes", default=None, help="comma-separated NxK (default: the 8 shapes; --quick: 4)")
    ap.add_argument("--no-dequant", action="store_true", help="skip the dequant kernel rows")
    ap.add_argument("--dequant", action="store_true",
                    help="only the dequant kernel: 4 formats x every tuned config on the shapes, against the copy "
                         "rate measured in the same run (issue 4: >= 85 %%)")
    args = ap.parse_args(argv)
    if args.dequant:
        return dequant_main(args)
    x_dtype = torch.float16 if args.x_dtype == "fp16" else torch.bfloat16
    reason = _launch.gpu_unavailable_reason()
    if reason:
        raise SystemExit(f"kernels_cuda unavailable: {reason}")
    import time

    from tools.perf.timing import CudaTimer, RotationPolicy, l2_bytes, one_rotation

    timer, rotation, l2 = CudaTimer(), RotationPolicy(), l2_bytes("cuda")

    def graph_time_us(fns) -> float:
        """Median graph-replay time per call of one pass over `fns` (one call per weight copy)."""
        t = timer.time(lambda i: fns[i](), len(fns), one_rotation(15))
        if t.us is None:
            raise RuntimeError(t.note)
        return t.us

    t0 = time.perf_counter()
    ms = [int(v) for v in args.m.split(",")] if args.m else ([1] if args.quick else [1, 4, 16])
    routes = [(Format.FP8_ROW, "bf16"), (Format.MXFP8, "bf16"), (Format.FP8_TENSOR, "fp8"), (Format.FP8_BLOCK, "fp8")]
    if not args.quick:
        routes += [(Format.FP8_TENSOR, "bf16"), (Format.FP8_BLOCK, "bf16"), (Format.FP8_ROW, "fp8")]
    if args.routes:
        routes = [(Format(r.split(":")[0]), r.split(":")[1]) for r in args.routes.split(",")]
    print(f"activations: {args.x_dtype} (act bf16 = W8A16 with these activations; fp8 = W8A8, quantized from them); "
          f"ref_us: F.linear in {args.x_dtype}")
    print(f"{'N':>7} {'K':>6} {'fmt':>10} {'act':>4} {'M':>3} {'us':>8} {'pct_copy':>8} {'ref_us':>8} {'speedup':>7}")
    shapes = BW_SHAPES[:2] + SPEED_SHAPES[::3] if args.quick else BW_SHAPES + SPEED_SHAPES
    if args.shapes:
        shapes = [tuple(int(v) for v in nk.split("x")) for nk in args.shapes.split(",")]
    for n, k in shapes:
        ref_us: dict[int, float] = {}  # bf16 cuBLAS per M, timed once per shape
        w = torch.randn(n, k, device="cuda") * 0.02
        wb = w.to(x_dtype)
        ncb = rotation.copies(wb.numel() * 2, l2)
        wbs = [wb.clone() for _ in range(ncb)]
        for fmt, act in routes:
            if fmt is Format.MXFP8 and x_dtype == torch.float16:
                continue
            qw = dispatch.quantize(w, fmt, act=act)
            ncq = rotation.copies(qw.nbytes, l2)
            qws = [dispatch.QWeight(qw.format, qw.act, qw.qdata.clone(), qw.scale.clone()) for _ in range(ncq)]
            run = _launch.w8a16_gemv if qw.act is Act.BF16 else _launch.w8a8_gemv
            for m in ms:
                x = torch.randn(m, k, device="cuda", dtype=x_dtype)
                us = graph_time_us([lambda q=q: run(x, q) for q in qws])
                if m not in ref_us:
                    ref_us[m] = graph_time_us([lambda b=b: torch.nn.functional.linear(x, b) for b in wbs])
                bus = ref_us[m]
                pct = qw.nbytes / (us * 1e-6) / (COPY_GBPS * 1e9) * 100
                print(f"{n:>7} {k:>6} {fmt.value:>10} {act:>4} {m:>3} {us:8.2f} {pct:7.1f}% {bus:8.2f} {bus / us:6.2f}x",
                      flush=True)
            if act == "bf16" and not args.no_dequant:
                us = graph_time_us([lambda q=q: _dequant.dequantize(q, torch.bfloat16) for q in qws])
                moved = qw.nbytes + 2 * n * k
                print(f"{n:>7} {k:>6} {fmt.value:>10} dequant->bf16 {us:8.2f} us "
                      f"{moved / (us * 1e-6) / (COPY_GBPS * 1e9) * 100:5.1f}% of copy BW (read+write)", flush=True)
            del qws
        del wbs
        torch.cuda.empty_cache()
    print(f"total {time.perf_counter() - t0:.1f} s (includes NVRTC compiles on a cold cache)")


def dequant_main(args) -> None:
    """The dequant kernel alone: every format x DEQUANT_CONFIGS x shape, bytes read (codes + scales) + written
    (bf16) per second against the copy kernel's rate measured in this run (tools/perf/timing.measure_ceilings)."""
    import dispatch
    from dispatch.formats import Format
    from tools.perf.timing import CudaTimer, RotationPolicy, l2_bytes, measure_ceilings, one_rotation, warm_gpu

    from . import _dequant
    from .candidates import DEQUANT_CONFIGS

    timer, rotation, l2 = CudaTimer(), RotationPolicy(), l2_bytes("cuda")
    warm_gpu(1.0)
    copy = measure_ceilings(timer).copy_gbps or COPY_GBPS
    print(f"copy rate measured in this run: {copy:.1f} GB/s (read + write)")
    shapes = [tuple(int(v) for v in nk.split("x")) for nk in args.shapes.split(",")] if args.shapes else \
        BW_SHAPES + SPEED_SHAPES
    print("columns: threads per CTA of the dequant kernel; 'torch .to' is torch's own fp8 -> bf16 conversion "
          "of the same codes (the same bytes read and written, no scale): what a generic elementwise kernel reaches")
    print(f"{'N':>7} {'K':>6} {'fmt':>10} " + " ".join(f"{f'{c.threads} threads':>15}" for c in DEQUANT_CONFIGS)
          + f" {'torch .to':>15}")
    best: list[float] = []
    for n, k in shapes:
        w = torch.randn(n, k, device="cuda") * 0.02
        for fmt in Format:
            qw = dispatch.quantize(w, fmt, act="bf16")
            qws = [dispatch.QWeight(qw.format, qw.act, qw.qdata.clone(), qw.scale.clone())
                   for _ in range(rotation.copies(qw.nbytes + 2 * n * k, l2))]
            moved = qw.nbytes + 2 * n * k
            cells, pcts = [], []
            for cfg in DEQUANT_CONFIGS:
                t = timer.time(lambda i, cfg=cfg, q=qws: _dequant.dequantize(q[i], torch.bfloat16, cfg), len(qws),
                               one_rotation(15))
                if t.us is None:
                    raise RuntimeError(f"{fmt.value} {n}x{k} {cfg}: {t.note}")
                pct = moved / (t.us * 1e-6) / (copy * 1e9) * 100
                pcts.append(pct)
                cells.append(f"{t.us:7.1f} {pct:5.1f}%")
            best.append(max(pcts))
            if fmt is Format.FP8_TENSOR:  # once per shape: the codes alone
                t = timer.time(lambda i, q=qws: q[i].qdata.to(torch.bfloat16), len(qws), one_rotation(15))
                if t.us is not None:
                    cells.append(f"{t.us:7.1f} {moved / (t.us * 1e-6) / (copy * 1e9) * 100:5.1f}%")
            print(f"{n:>7} {k:>6} {fmt.value:>10} " + " ".join(f"{c:>15}" for c in cells), flush=True)
            del qws
        torch.cuda.empty_cache()
    print(f"best config >= 85 % of copy: {sum(p >= 85 for p in best)} of {len(best)} (shape x format); "
          f"default config ({DEQUANT_CONFIGS[0].threads} threads) is the first column")


if __name__ == "__main__":
    main()

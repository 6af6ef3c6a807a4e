"""One CUDA GEMV configuration, launched a few times, for Nsight Compute:
    ncu --set full -k regex:fp8d_ -s 2 -c 1 python -m tools.perf.profile_gemv --n 4096 --k 14336 --fmt fp8_row [--tiles]
(the first launches compile and warm up; -s skips them). Prints the median time of plain back-to-back launches."""

from __future__ import annotations

import argparse

import torch


def problem_parser(n: int, k: int, m: int) -> argparse.ArgumentParser:
    """The options every profile script takes: the problem (--n --k --m --fmt) and --iters."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=n)
    ap.add_argument("--k", type=int, default=k)
    ap.add_argument("--m", type=int, default=m)
    ap.add_argument("--fmt", default="fp8_row")
    ap.add_argument("--iters", type=int, default=5)
    return ap


def main(argv=None) -> None:
    import dispatch
    from dispatch.formats import Format
    from kernels_cuda import _launch
    from kernels_cuda.configs import GemvConfig
    from tools.perf.timing import eager_median_us

    ap = problem_parser(4096, 14336, 1)
    ap.add_argument("--act", default="bf16")
    ap.add_argument("--config", default="8,1,4", help="warps,mtiles,unroll[,smem_ring]")
    ap.add_argument("--tiles", action="store_true", help="read the weight's decode tiles (kernels_cuda/_tiles.py)")
    args = ap.parse_args(argv)
    warps, mtiles, unroll, *ring = (int(v) for v in args.config.split(","))
    cfg = GemvConfig(warps=warps, mtiles=mtiles, unroll=unroll, smem_ring=ring[0] if ring else 0)
    qw = dispatch.quantize(torch.randn(args.n, args.k, device="cuda") * 0.02, Format(args.fmt), act=args.act)
    x = torch.randn(args.m, args.k, device="cuda", dtype=torch.bfloat16)
    run = _launch.w8a16_gemv if args.act == "bf16" else _launch.w8a8_gemv
    tiles = None
    if args.tiles:
        from kernels_cuda import _tiles
        tiles = _tiles.tile_codes(qw.qdata)
    us = eager_median_us(lambda: run(x, qw, config=cfg, tiles=tiles), args.iters)
    print(f"{args.fmt}/{args.act} {args.n}x{args.k} M={args.m} {cfg}: median {us:.2f} us (eager)")


if __name__ == "__main__":
    main()

"""One Triton W8A16 GEMM configuration (or bf16 F.linear, its baseline), launched a few times, for Nsight Compute:
    ncu --section SpeedOfLight -k regex:_w8a16_gemm -s 2 -c 1 python -m tools.perf.profile_gemm --m 1024 --n 6144 --k 4096
(the first launches compile and warm up; -s skips them). Prints the median time of plain back-to-back launches."""

from __future__ import annotations

import torch


def main(argv=None) -> None:
    import dispatch
    from dispatch.formats import Format
    from kernels_triton import _gemm_launch
    from kernels_triton._gemm_config import GemmConfig
    from tools.perf.profile_gemv import problem_parser
    from tools.perf.timing import eager_median_us

    ap = problem_parser(6144, 4096, 1024)
    ap.add_argument("--config", default="128,128,64,8,4,1,0,1",
                    help="block_m,block_n,block_k,num_warps,num_stages,swap_ab,tma,split_k (GemmConfig, group_m 8)")
    ap.add_argument("--bf16", action="store_true", help="time bf16 F.linear (cuBLAS) on the same shape instead")
    args = ap.parse_args(argv)
    bm, bn, bk, warps, stages, swap, tma, split = (int(v) for v in args.config.split(","))
    cfg = GemmConfig(bm, bn, bk, 8, warps, stages, swap_ab=bool(swap), tma=bool(tma), split_k=split)
    w = torch.randn(args.n, args.k, device="cuda") * 0.02
    x = torch.randn(args.m, args.k, device="cuda", dtype=torch.bfloat16)
    if args.bf16:
        wb = w.to(torch.bfloat16)
        what = "bf16 F.linear"

        def run():
            torch.nn.functional.linear(x, wb)
    else:
        qw = dispatch.quantize(w, Format(args.fmt), act="bf16")
        what = f"{args.fmt}/bf16 {cfg}"

        def run():
            _gemm_launch.w8a16_gemm(x, qw, None, torch.bfloat16, cfg, hw_fp8=True)
    print(f"{what} {args.n}x{args.k} M={args.m}: median {eager_median_us(run, args.iters):.2f} us (eager)")


if __name__ == "__main__":
    main()

"""Same-run A/B of the dequant kernel (kernels_cuda/csrc/dequant.cu) against an older version of it, with a copy of
the same bytes as each shape's own ceiling.

    git show 81d8452:kernels_cuda/csrc/dequant.cu > .cache/dequant_ab/dequant_s6.cu   # session 6's kernel
    python -m tools.perf.dequant_ab --old .cache/dequant_ab/dequant_s6.cu

The old source is compiled beside the current one (same headers) and launched with its own geometry (one 16-code
chunk per thread, ceil(N*K/16/256) CTAs of 256 threads; pass --old-geometry for another). Timing: CUDA-graph replay
over weight copies > 3.3x L2 (tools/perf/timing.py), median. '% copy' is bytes read (codes + scales) + written (bf16)
per second against the copy kernel's rate on 1 GiB (tools/perf/timing.measure_ceilings); 'copy same bytes' is that
copy kernel (fp32 negation) moving the same number of bytes in and out, rotated the same way: what any stream of
that size reaches on this GPU.
"""

from __future__ import annotations

import argparse
import math
import pathlib


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.perf.dequant_ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="path of the older dequant.cu")
    ap.add_argument("--old-geometry", default="16x256", help="codes per thread x threads per CTA of the old launcher")
    ap.add_argument("--shapes", default="28672x4096,128256x4096,8192x8192,4096x4096,6144x4096,8192x2560")
    args = ap.parse_args(argv)

    import torch

    import dispatch
    from dispatch.formats import Format
    from kernels_cuda import _dequant, _driver, _launch, compiler
    from kernels_cuda._driver import ptr
    from kernels_cuda._kinds import DTYPE_CODE, SCALE_CODE
    from kernels_cuda.candidates import DEQUANT_CONFIGS
    from tools.perf.timing import CudaTimer, RotationPolicy, l2_bytes, measure_ceilings, one_rotation, warm_gpu

    old_name = "dequant_ab_old.cu"
    old_text = pathlib.Path(args.old).read_text()
    real_sources = compiler.sources
    compiler.sources = lambda: {**real_sources(), old_name: old_text}
    per_thread, threads = (int(v) for v in args.old_geometry.split("x"))

    timer, rotation, l2 = CudaTimer(), RotationPolicy(), l2_bytes("cuda")
    warm_gpu(1.0)
    copy = measure_ceilings(timer).copy_gbps
    arch = _launch.device_arch(0)
    print(f"copy kernel on 1 GiB: {copy:.1f} GB/s (read + write); arch {arch}; old: {args.old} ({args.old_geometry})")

    def old_dequant(qw):
        n, k = qw.shape
        out = torch.empty((n, k), dtype=torch.bfloat16, device=qw.device)
        scale = qw.scale.view(torch.uint8) if qw.format is Format.MXFP8 else qw.scale
        kern = _launch._kernel(old_name, "fp8d_dequant", (("FP8D_CFG_SCALE", SCALE_CODE[qw.format]),), 0, arch)
        _driver.launch(kern, (math.ceil(n * k / per_thread / threads), 1, 1), (threads, 1, 1),
                       (ptr(qw.qdata), ptr(scale), ptr(out), int(n), int(k), int(DTYPE_CODE[torch.bfloat16])))
        return out

    def pct(moved, us):
        return moved / (us * 1e-6) / (copy * 1e9) * 100

    def timed(fn, ncopies):
        t = timer.time(fn, ncopies, one_rotation(15))
        if t.us is None:
            raise RuntimeError(t.note)
        return t.us

    new_cfgs = list(DEQUANT_CONFIGS)
    head = ["old"] + [f"new {c}" for c in new_cfgs] + ["copy same bytes"]
    print(f"{'N x K':>12} {'fmt':>10} " + " ".join(f"{h:>17}" for h in head))
    wins = 0
    total = 0
    for nk in args.shapes.split(","):
        n, k = (int(v) for v in nk.split("x"))
        w = torch.randn(n, k, device="cuda") * 0.02
        copy_us = None
        for fmt in (Format.FP8_ROW, Format.MXFP8, Format.FP8_BLOCK):
            qw = dispatch.quantize(w, fmt, act="bf16")
            moved = qw.nbytes + 2 * n * k
            nc = rotation.copies(qw.nbytes, l2)
            qws = [dispatch.QWeight(qw.format, qw.act, qw.qdata.clone(), qw.scale.clone()) for _ in range(nc)]
            for q in qws:  # the old kernel is bit-identical too, or its time means nothing
                assert torch.equal(old_dequant(q), dispatch.dequantize(q).to(torch.bfloat16))
            us = [timed(lambda i, q=qws: old_dequant(q[i]), nc)]
            us += [timed(lambda i, q=qws, c=c: _dequant.dequantize(q[i], torch.bfloat16, c), nc) for c in new_cfgs]
            if copy_us is None:
                half = moved // 2 // 4  # fp32 elements in (and out): the same bytes moved
                srcs = [torch.zeros(half, device="cuda") for _ in range(rotation.copies(half * 4, l2))]
                dst = torch.empty(half, device="cuda")
                copy_us = timed(lambda i, s=srcs: torch.neg(s[i], out=dst), len(srcs))
                del srcs
            cells = [f"{u:7.1f} {pct(moved, u):5.1f}%" for u in us + [copy_us]]
            print(f"{nk:>12} {fmt.value:>10} " + " ".join(f"{c:>17}" for c in cells), flush=True)
            total += 1
            wins += min(us[1:]) < us[0]
            del qws
        torch.cuda.empty_cache()
    print(f"new (best config) faster than old in {wins} of {total} cells")


if __name__ == "__main__":
    main()

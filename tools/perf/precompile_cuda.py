"""Fill the NVRTC cache with every CUDA kernel variant a GPU run will ask for, in parallel, before the run.

The kernels compile at first launch, one module per configuration, in the calling process: on a fresh GPU machine
(empty cache) `tests/test_cuda_kernels.py` spent most of its 2-6 minutes compiling (session 6) and the decode
autotune another minute, out of a 30-minute device budget. Compiling the same modules up front on all cores
takes a fraction of that, and the run then finds every module in the content-addressed cache.

The cache key of a module is (source, defines, arch, NVRTC version): the launchers name their modules through
`kernels_cuda._launch.gemv_module` / `act_quant_module` / `dequant_module` and
`kernels_cuda._dequant_route.scale_cols_module`, and this tool compiles exactly what
those return, so the run then finds every module in the content-addressed cache. No GPU is touched; NVRTC alone
runs (it works on a CPU-only machine too).

    python -m tools.perf.precompile_cuda                      # sm_90: native, compute_80 and emulated-MMA paths
    python -m tools.perf.precompile_cuda --paths native --jobs 16
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import time
from typing import Any

PATHS = ("native", "sm80", "emulated")
# One M per token-tile count (1, 2, 4 MMA column tiles of 8 tokens)
TOKEN_TILE_MS = (1, 9, 17)


def variants(arch: str, paths: tuple[str, ...] = PATHS) -> list[tuple[str, str, tuple, str]]:
    """(kind, source, defines, arch) work items: every GEMV module (family x scale layout x x dtype x token tiles x
    row tiles x register ring that fits), the activation-quantizer module and the dequant modules (one per
    scale layout), on each path; on sm_90's native path the W8A16 wgmma GEMM's (sm_90a) modules."""
    import torch

    from dispatch.formats import ActGranularity, Format
    from kernels_cuda._kinds import ACTQ_CODE, DTYPE_CODE, SCALE_CODE
    from kernels_cuda._dequant_route import scale_cols_module
    from kernels_cuda._launch import act_quant_module, dequant_module, gemv_module
    from kernels_cuda._w8a8_fused import FQ_MAX_M, FqGemvConfig, fused_module
    from kernels_cuda._w8a8_inline import INLINE_MAX_M, inline_module
    from kernels_cuda.configs import MAX_UNROLL, SMEM_RING_STEPS, GemvConfig

    out: list[tuple[str, str, tuple, str]] = []
    for path in paths:
        a = "compute_80" if path == "sm80" else arch
        emulate = path == "emulated"
        for m in TOKEN_TILE_MS:
            rings = [GemvConfig(8, mt, u) for mt in (1, 2) for u in range(1, MAX_UNROLL + 1)]
            rings += [GemvConfig(8, mt, 1, SMEM_RING_STEPS) for mt in (1, 2)]  # the ring in shared memory (CUDA)
            for cfg in (c for c in rings if c.fits(m)):
                for fmt in Format:
                    for xdt in (torch.bfloat16, torch.float16):
                        if fmt is Format.MXFP8 and xdt == torch.float16:
                            continue  # refused by the launcher (2^e scales leave f16's range)
                        name, _, d = gemv_module(False, SCALE_CODE[fmt], DTYPE_CODE[xdt], m, cfg, emulate)
                        out.append(("gemv", name, d, a))
                    # the same GEMV on decode tiles (kernels_cuda/_tiles.py), bf16 activations; their ring is in
                    # registers only
                    if not cfg.smem_ring:
                        name, _, d = gemv_module(False, SCALE_CODE[fmt], DTYPE_CODE[torch.bfloat16], m, cfg, emulate,
                                                 tiled=True)
                        out.append(("gemv", name, d, a))
                for g in ActGranularity:
                    name, _, d = gemv_module(True, ACTQ_CODE[g], 0, m, cfg, emulate)
                    out.append(("gemv", name, d, a))
                    # the W8A8 GEMV that quantizes x in its K loop (kernels_cuda/_w8a8_inline.py), M = 1 and 2
                    for mi in (mm for mm in range(1, INLINE_MAX_M + 1) if m == 1 and cfg.fits(mm)):
                        for xdt in (torch.bfloat16, torch.float16):
                            name, _, d = inline_module(ACTQ_CODE[g], mi, xdt, cfg, emulate)
                            out.append(("gemv", name, d, a))
                    if cfg.smem_ring:
                        continue
                    name, _, d = gemv_module(True, ACTQ_CODE[g], 0, m, cfg, emulate, tiled=True)
                    out.append(("gemv", name, d, a))
                    if m <= FQ_MAX_M:  # the one-launch W8A8 GEMV (kernels_cuda/_w8a8_fused.py), persistent or not
                        for persistent in (True, False):
                            fq_cfg = FqGemvConfig(cfg.warps, cfg.mtiles, cfg.unroll, persistent=persistent)
                            name, _, d = fused_module(ACTQ_CODE[g], m, fq_cfg, emulate)
                            out.append(("gemv", name, d, a))
        if not emulate:  # the quantizers and the dequant kernel have no MMA to emulate
            out.append(("act_quant", *act_quant_module(), a))
            for fmt in Format:
                name, _, d = dequant_module(fmt)
                out.append(("dequant", name, d, a))
            for per_tensor in (False, True):
                name, _, d = scale_cols_module(per_tensor)
                out.append(("scale_cols", name, d, a))
        if path == "native" and arch == "sm_90":  # the W8A16 wgmma GEMM: sm_90a code, every config of its spaces
            from kernels_cuda import _wgmma_gemm
            from kernels_cuda.candidates import wgmma_configs

            for fmt in _wgmma_gemm.FORMATS:
                for cfg in wgmma_configs():
                    for fold in (False, True) if fmt is Format.MXFP8 else (False,):  # MX: both decodes
                        name, _, d = _wgmma_gemm.module(fmt, cfg, fold)
                        if ("wgmma_gemm", name, d, _wgmma_gemm.compile_arch(arch)) not in out:  # split: one module
                            out.append(("wgmma_gemm", name, d, _wgmma_gemm.compile_arch(arch)))
            out.append(("wgmma_gemm", _wgmma_gemm.REDUCE_SOURCE, (), _wgmma_gemm.compile_arch(arch)))
    return out


def _run(item: tuple[str, str, tuple, str]) -> str:
    from kernels_cuda import compiler

    _, name, defines, arch = item
    compiler.compile_module(name, arch, dict(defines))
    return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.perf.precompile_cuda", description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="sm_90", help="the device's arch (the launchers' native path)")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"comma list of {', '.join(PATHS)}")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    paths = tuple(p for p in args.paths.split(",") if p)
    bad = set(paths) - set(PATHS)
    if bad:
        ap.error(f"unknown paths {sorted(bad)}; choose from {PATHS}")
    from kernels_cuda import compiler

    why = compiler.nvrtc_unavailable_reason()
    if why:
        print(f"[precompile] NVRTC unavailable: {why}", file=sys.stderr)
        return 2
    work = variants(args.arch, paths)
    t0 = time.time()
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        errors = [f"{item}: {e}" for item, e in zip(work, ex.map(_run_safe, work)) if e]
    print(f"[precompile] {len(work)} work items, {len(errors)} failed, {time.time() - t0:.0f} s, "
          f"{args.jobs} processes, cache {compiler.cache_dir()}")
    for e in errors[:10]:
        print("  ", e)
    return 1 if errors else 0


def _run_safe(item: tuple[Any, ...]) -> str:
    try:
        return _run(item)
    except Exception as e:  # reported per item: one failing variant must not hide the others
        return f"{type(e).__name__}: {str(e)[:300]}"


if __name__ == "__main__":
    sys.exit(main())

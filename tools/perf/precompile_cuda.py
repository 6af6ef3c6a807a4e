"""Fill the NVRTC cache with every CUDA kernel variant a GPU run will ask for, in parallel, before the run.

The kernels compile at first launch, one module per configuration, in the calling process: on a fresh GPU machine
(empty cache) `tests/test_cuda_kernels.py` spent most of its 2-6 minutes compiling (session 6) and the decode
autotune another minute, out of a 30-minute device budget. Compiling the same modules up front on all cores
takes a fraction of that, and the run then finds every module in the content-addressed cache.

The cache keys must be the ones the launchers compute, so the defines are not rebuilt here: each worker calls the
launcher's own spec functions (`kernels_cuda._launch._gemv_spec`, `_act_quant_launches`) with the module loader
replaced by a compile. No GPU is touched; NVRTC alone runs (it works on a CPU-only machine too).

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
from unittest import mock

PATHS = ("native", "sm80", "emulated")
# One M per token-tile count (1, 2, 4 MMA column tiles of 8 tokens)
TOKEN_TILE_MS = (1, 9, 17)


def _compile_only(name: str, entry: str, defines: tuple, device: int, arch: str) -> None:
    from kernels_cuda import compiler

    compiler.compile_module(name, arch, dict(defines))


def variants(arch: str, paths: tuple[str, ...] = PATHS) -> list[tuple[Any, ...]]:
    """(kind, args) work items: every GEMV module (family x scale layout x x dtype x token tiles x row tiles x
    register ring that fits) and the activation-quantizer module, on each path."""
    import torch

    from dispatch.formats import ActGranularity, Format
    from kernels_cuda._kinds import ACTQ_CODE, DTYPE_CODE, SCALE_CODE
    from kernels_cuda.configs import MAX_UNROLL, GemvConfig

    out: list[tuple[Any, ...]] = []
    for path in paths:
        a = "compute_80" if path == "sm80" else arch
        emulate = path == "emulated"
        for m in TOKEN_TILE_MS:
            rings = [GemvConfig(8, mt, u) for mt in (1, 2) for u in range(1, MAX_UNROLL + 1)]
            for cfg in (c for c in rings if c.fits(m)):
                for fmt in Format:
                    for xdt in (torch.bfloat16, torch.float16):
                        if fmt is Format.MXFP8 and xdt == torch.float16:
                            continue  # refused by the launcher (2^e scales leave f16's range)
                        out.append(("gemv", False, SCALE_CODE[fmt], DTYPE_CODE[xdt], m, cfg, a, emulate))
                for g in ActGranularity:
                    out.append(("gemv", True, ACTQ_CODE[g], 0, m, cfg, a, emulate))
        if not emulate:  # the quantizers have no MMA to emulate; one module holds every granularity's entry
            out.append(("act_quant", ActGranularity.PER_TENSOR, a))
    return out


def _run(item: tuple[Any, ...]) -> str:
    from kernels_cuda import _launch

    with mock.patch.object(_launch, "_kernel", _compile_only):
        if item[0] == "gemv":
            _, w8a8, kind, xk, m, cfg, arch, emulate = item
            _launch._gemv_spec.__wrapped__(w8a8, kind, xk, m, 1, cfg, 0, arch, emulate, False)
        else:
            _, g, arch = item
            _launch._act_quant_launches.__wrapped__(1, 4096, g, 0, arch, False)
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

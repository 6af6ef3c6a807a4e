"""Digest of every compiled CUDA kernel image, module by module: the evidence that an edit of shared kernel sources
left the kernels already measured unchanged.

An edit of a shared header (a new policy hook, a helper moved to a header) changes the source hash of every CUDA
candidate, so the tuning tables' entries go stale (dispatch.registry.source_hash), although the kernels they
measured may compile to the very same machine code. This tool compiles, through NVRTC (no GPU needed), every
module `tools.perf.precompile_cuda.variants` lists for an arch and prints one JSON object
{module key: sha256 of the image}. `tools.restamp_table --images-equal ARCH` runs it in a checkout of the measured
revision and in this one, and accepts a .cu/.cuh difference only when every module of the measured revision
compiles to byte-identical images in both (candidate by candidate: each key names the candidates that load the module).

    python -m tools.perf.cuda_image_digest --arch sm_90 [--paths native] [--jobs 2] > digests.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import sys


def module_candidates(name: str, defines: tuple) -> str:
    """The candidate ids (comma-separated) whose launches load this module; "*" when the source is not known here
    (then every CUDA candidate counts as affected)."""
    d = dict(defines)
    if name in ("gemv_w8a16.cu", "gemv_w8a8.cu"):
        family = "cuda.w8a16_gemv" if name == "gemv_w8a16.cu" else "cuda.w8a8_gemv"
        if d.get("FP8D_CFG_TILED"):  # the variants on decode tiles (kernels_cuda/_tiles.py)
            return family + "_tiles"
        if d.get("FP8D_CFG_INLINE"):  # the W8A8 GEMV that quantizes x in its K loop (kernels_cuda/_w8a8_inline.py)
            return "cuda.w8a8_gemv_inline"
        return "cuda.w8a8_gemv_fq" if d.get("FP8D_CFG_FQ") else family
    # the activation quantizer runs before both W8A8 GEMVs of two launches
    return {"act_quant.cu": "cuda.w8a8_gemv,cuda.w8a8_gemv_tiles", "dequant.cu": "cuda.dequant_cublas",
            "scale_cols.cu": "cuda.dequant_cublas", "gemm_w8a16_wgmma.cu": "cuda.w8a16_gemm_wgmma",
            "wgmma_splitk_reduce.cu": "cuda.w8a16_gemm_wgmma"}.get(name, "*")


def module_key(item: tuple) -> str:
    """'<candidates>|<arch>:<source>:<defines>'"""
    kind, name, defines, arch = item
    return f"{module_candidates(name, defines)}|{arch}:{name}:" + ",".join(f"{k}={v}" for k, v in defines)


def _digest(item: tuple) -> tuple[str, str]:
    from kernels_cuda import compiler

    _, name, defines, arch = item
    image = compiler.compile_module(name, arch, dict(defines)).image()
    return module_key(item), "sha256:" + hashlib.sha256(image).hexdigest()


def digests(arch: str, paths: tuple[str, ...], jobs: int) -> dict[str, str]:
    from tools.perf.precompile_cuda import variants

    items = variants(arch, paths)
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        return dict(sorted(pool.map(_digest, items)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.perf.cuda_image_digest", description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--paths", default="native", help="comma-separated subset of native,sm80,emulated")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args(argv)
    json.dump(digests(a.arch, tuple(a.paths.split(",")), a.jobs), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

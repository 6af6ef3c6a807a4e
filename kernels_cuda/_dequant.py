"""Launcher of the weight dequantization kernel (csrc/dequant.cu): the first half of cuda.dequant_cublas's route.

Apart from _launch.py (the GEMV and activation-quantization launchers) because only cuda.dequant_cublas hashes this
file: a change to the dequant geometry leaves the decode GEMVs' tuned entries current.
"""

from __future__ import annotations

import math

import torch

from dispatch.errors import FormatError, UnsupportedError
from dispatch.formats import Format, QWeight

from . import _driver
from ._driver import ptr
from ._kinds import DTYPE_CODE
from ._launch import _kernel, dequant_module, device_arch
from .configs import DequantConfig


def dequant_geometry(n: int, k: int, cfg: DequantConfig) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) of csrc/dequant.cu. K % 8 == 0: one 8-code chunk per thread on a 2-D grid, x along a row's
    chunks (the largest multiple of 32 up to cfg.threads that divides them, else the chunks rounded up to a warp,
    capped), y over rows (several rows per CTA when a row has few chunks), z where the rows pass gridDim.y's
    65535. Else the scalar grid-stride loop (grid capped, the loop covers the rest)."""
    if k % 8 == 0:
        chunks = k // 8
        tx = next((t for t in range(cfg.threads, 31, -32) if chunks % t == 0),
                  min(cfg.threads, -(-chunks // 32) * 32))
        ty = max(1, cfg.threads // tx)
        row_blocks = -(-n // ty)
        gy = min(row_blocks, 65535)
        return (-(-chunks // tx), gy, -(-row_blocks // gy)), (tx, ty, 1)
    return (max(1, min(math.ceil(n * k / cfg.threads), 65535 * 16)), 1, 1), (cfg.threads, 1, 1)


def dequantize(qw: QWeight, dtype: torch.dtype = torch.bfloat16, config: DequantConfig | None = None, *,
               arch: str | None = None, force_sw_cvt: bool = False) -> torch.Tensor:
    """dequantize(qw).to(dtype), bit-identical, for bf16/fp16 outputs."""
    if dtype not in (torch.bfloat16, torch.float16):
        raise UnsupportedError(f"the dequant kernel writes bf16 or fp16, got {dtype}")
    if qw.device.type != "cuda":
        raise FormatError("the dequant kernel needs the weight on a CUDA device")
    cfg = config or DequantConfig()
    n, k = qw.shape
    out = torch.empty((n, k), dtype=dtype, device=qw.device)
    scale = qw.scale.view(torch.uint8) if qw.format is Format.MXFP8 else qw.scale
    grid, block = dequant_geometry(n, k, cfg)
    arch = arch or device_arch(qw.device.index or 0)
    _driver.launch(_kernel(*dequant_module(qw.format, force_sw_cvt), qw.device.index or 0, arch), grid, block,
                   (ptr(qw.qdata), ptr(scale), ptr(out), int(n), int(k), int(DTYPE_CODE[dtype])))
    return out

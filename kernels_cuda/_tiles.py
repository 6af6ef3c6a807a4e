"""Decode tiles: an opt-in second copy of a weight's codes in the layout the CUDA decode GEMVs read fastest.

The GEMVs (csrc/skinny_common.cuh) read, per load instruction of a warp, 64 contiguous bytes from each of eight rows of
the row-major codes. In the tiled layout each (16-row tile, 128-wide K step) block of 2 KB is stored as
[h][q][lane][16 bytes] (row = 16 T + 8 h + g, k = 128 S + 64 q + 16 t + b, lane = 4 g + t), so the same instruction
reads 512 contiguous bytes and needs no predicate. Measured on the H200 (session 22, tools/perf/probe_tiled_gemv.py,
168 decode cells of 8 shapes x 7 format/acts x M = 1, 4, 16, one run): the same kernel at the same config 0.79-0.99x
the time in 157 cells (median 0.92x; bit-identical output in all 168), slower mainly with a one-tile ring-1 config
where the row-major tables pick it to fit three CTAs per SM (the tiled addressing needs more registers), see
`helps`; its best config 0.72-0.99x the dispatched path's time in 158 cells.

Why opt-in: the tiles are a COPY (N x K bytes, rows padded to 32 and K to 128). Prefill routes (cuBLAS `_scaled_mm`,
the Triton GEMMs, the dequantize route) read the row-major codes, so a weight that serves both keeps both: +100 % of
its code memory, allocated here, at load time, where an engine budgets it (never on the first token).
`dispatch.add_decode_tiles(qw)` makes them; the candidates cuda.w8a16_gemv_tiles / cuda.w8a8_gemv_tiles read them
(kernels_cuda/candidates.py; chosen from tables tuned on tiles, else at the row-major GEMV's config where `helps`);
`qw.to(...)` drops them with the rest of the weight's cache.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from dispatch.decode_tiles import CACHE_KEY as TILES_KEY
from dispatch.errors import FormatError, UnsupportedError
from dispatch.formats import Act, Format, QWeight

from . import _driver
from ._driver import ptr
from ._kinds import ACTQ_CODE, DTYPE_CODE, SCALE_CODE
from ._launch import (_aligned16, _check_gemv, _kernel, _out_and_bias, device_arch, gemv_module, pdl_allowed,
                      quantize_activation)
from .configs import THREE_CTAS_AT_RING_1, GemvConfig

ROW_MULTIPLE = 32  # two 16-row tiles per CTA read a pair: pad rows so the second of the last pair exists
BLOCK_BYTES = 16 * 128


CHUNK_BYTES = 64 << 20  # transient memory of tile_codes beyond its output: one padded chunk of rows


def tile_codes(codes: torch.Tensor) -> torch.Tensor:
    """[N, K] e4m3 (or uint8) codes -> the tiled layout, flat uint8 (N and K zero-padded to ROW_MULTIPLE and 128).
    Row tiles are the outermost dimension, so it is built ROW_MULTIPLE-row chunks at a time: at most ~CHUNK_BYTES of
    transient memory beyond the output, as the quantizers bound theirs."""
    n, k = codes.shape
    np_, kp = math.ceil(n / ROW_MULTIPLE) * ROW_MULTIPLE, math.ceil(k / 128) * 128
    src = codes.view(torch.uint8)
    out = torch.empty(np_ * kp, dtype=torch.uint8, device=codes.device)
    rows = max(ROW_MULTIPLE, CHUNK_BYTES // kp // ROW_MULTIPLE * ROW_MULTIPLE)
    for r0 in range(0, np_, rows):
        r1 = min(r0 + rows, np_)
        w = torch.zeros((r1 - r0, kp), dtype=torch.uint8, device=codes.device)
        if r0 < n:
            w[:min(r1, n) - r0, :k] = src[r0:min(r1, n)]
        # dims (T, h, g, S, q, t, b) -> (T, S, h, q, g, t, b)
        blocks = w.view((r1 - r0) // 16, 2, 8, kp // 128, 2, 4, 16).permute(0, 3, 1, 4, 2, 5, 6)
        out[r0 * kp:r1 * kp] = blocks.reshape(-1)
    return out


def add_decode_tiles(qw: QWeight) -> QWeight:
    """Make `qw`'s decode tiles (once; on its CUDA device) and keep them in its cache. Returns `qw`."""
    if qw.device.type != "cuda":
        raise UnsupportedError(f"decode tiles serve the CUDA decode GEMVs; the weight is on {qw.device} "
                               "(move it to the GPU first: QWeight.to('cuda') drops tiles made before)")
    if qw.in_features % 16:
        raise UnsupportedError(f"the CUDA decode GEMVs need K % 16 == 0, got K = {qw.in_features}: no tiles to make")
    if TILES_KEY not in qw._cache:
        qw._cache[TILES_KEY] = tile_codes(qw.qdata)
    return qw


def decode_tiles(qw: QWeight) -> torch.Tensor | None:
    return qw._cache.get(TILES_KEY)


def helps(cfg: GemvConfig, act: Act, fmt: Format) -> bool:
    """Whether the tiled layout is used at this config: everywhere but one row tile with a ring of 1 for the pairs
    whose row-major module fits three CTAs per SM there (configs.THREE_CTAS_AT_RING_1, which is why the tables pick
    it): the tiled addressing's extra registers break that (1.00-1.17x slower in session 22's A/B at the tables'
    configs). With this rule the tiles serve 160 of that A/B's 168 cells, 0.79-1.04x the row-major time."""
    return not (cfg.mtiles == 1 and cfg.unroll == 1 and (act, fmt) in THREE_CTAS_AT_RING_1)


def _tiled_module(w8a8: bool, kind_code: int, xkind: int, m: int, cfg: GemvConfig, emulate_mma: bool,
                  force_sw_cvt: bool) -> tuple[str, str, tuple[tuple[str, Any], ...]]:
    name, entry, d = gemv_module(w8a8, kind_code, xkind, m, cfg, emulate_mma, force_sw_cvt)
    return name, entry, tuple(sorted(d + (("FP8D_CFG_TILED", 1),)))


@functools.lru_cache(maxsize=4096)
def _spec(w8a8: bool, kind_code: int, xkind: int, m: int, n: int, cfg: GemvConfig, device: int, arch: str | None,
          emulate_mma: bool, force_sw_cvt: bool) -> tuple[_driver.LoadedKernel, tuple, tuple, int, bool]:
    """(kernel, grid, block, smem, pdl), cached per shape (the row-major launcher's geometry)."""
    arch = arch or device_arch(device)
    kernel = _kernel(*_tiled_module(w8a8, kind_code, xkind, m, cfg, emulate_mma, force_sw_cvt), device, arch)
    return (kernel, (math.ceil(n / cfg.rows_per_cta), 1, 1), (32 * cfg.warps, 1, 1), cfg.smem_bytes(m),
            pdl_allowed(arch))


def _tiles_of(qw: QWeight, tiles: torch.Tensor | None) -> torch.Tensor:
    tiles = decode_tiles(qw) if tiles is None else tiles
    if tiles is None:
        raise FormatError(f"{qw!r} has no decode tiles; make them with dispatch.add_decode_tiles(qw)")
    n, k = qw.shape
    want = math.ceil(n / ROW_MULTIPLE) * ROW_MULTIPLE * math.ceil(k / 128) * 128
    if tiles.dtype != torch.uint8 or tiles.numel() != want or tiles.device != qw.device:
        raise FormatError(f"decode tiles of {tiles.numel()} {tiles.dtype} bytes on {tiles.device} are not the tiled "
                          f"layout of a [{n}, {k}] weight on {qw.device} ({want} uint8); make them with "
                          "dispatch.add_decode_tiles")
    return tiles


def w8a16_gemv_tiled(x2d: torch.Tensor, qw: QWeight, bias: torch.Tensor | None = None,
                     out_dtype: torch.dtype | None = None, config: GemvConfig | None = None, *,
                     tiles: torch.Tensor | None = None, arch: str | None = None, emulate_mma: bool = False,
                     force_sw_cvt: bool = False) -> torch.Tensor:
    """_launch.w8a16_gemv reading the weight's decode tiles: the same sums in the same order (the same bits)."""
    m, n, k = _check_gemv(x2d, qw)
    tiles = _tiles_of(qw, tiles)
    if x2d.dtype not in (torch.bfloat16, torch.float16):
        raise UnsupportedError(f"W8A16 GEMV takes bf16 or fp16 activations, got {x2d.dtype}")
    if qw.format is Format.MXFP8 and x2d.dtype == torch.float16:
        raise UnsupportedError("mxfp8 with fp16 activations: 2^e scales exceed fp16's range in the MMA operand; "
                               "use bf16 activations")
    cfg = config or GemvConfig()
    if not cfg.fits(m):
        raise UnsupportedError(f"{cfg} does not fit the register budget at M = {m}")
    y, out_dtype = _out_and_bias(x2d, n, bias, out_dtype)
    x2d = _aligned16(x2d)
    kernel, grid, block, smem, pdl = _spec(False, SCALE_CODE[qw.format], DTYPE_CODE[x2d.dtype], m, n, cfg,
                                           x2d.device.index or 0, arch, emulate_mma, force_sw_cvt)
    # mxfp8: each CTA first scans its rows' scale codes with 16-byte loads (gemv_w8a16.cu cta_needs_rare)
    scale = _aligned16(qw.scale) if qw.format is Format.MXFP8 else qw.scale
    args = (ptr(tiles), ptr(scale), ptr(x2d), ptr(bias), ptr(y), m, n, k,
            DTYPE_CODE[bias.dtype] if bias is not None else 0, DTYPE_CODE[out_dtype])
    _driver.launch(kernel, grid, block, args, smem, pdl=pdl)
    return y


def w8a8_gemv_tiled(x2d: torch.Tensor, qw: QWeight, bias: torch.Tensor | None = None,
                    out_dtype: torch.dtype | None = None, config: GemvConfig | None = None, *,
                    tiles: torch.Tensor | None = None, arch: str | None = None, emulate_mma: bool = False,
                    force_sw_cvt: bool = False) -> torch.Tensor:
    """_launch.w8a8_gemv (the fused activation quantizer, then the GEMV) reading the weight's decode tiles."""
    m, n, k = _check_gemv(x2d, qw)
    tiles = _tiles_of(qw, tiles)
    g = qw.act_granularity
    if g is None:
        raise FormatError(f"{qw!r} is W8A16 (act='bf16'); use w8a16_gemv_tiled")
    cfg = config or GemvConfig()
    if not cfg.fits(m):
        raise UnsupportedError(f"{cfg} does not fit the register budget at M = {m}")
    y, out_dtype = _out_and_bias(x2d, n, bias, out_dtype)
    xq, xs = quantize_activation(x2d, g, arch=arch, force_sw_cvt=force_sw_cvt)
    kernel, grid, block, smem, pdl = _spec(True, ACTQ_CODE[g], 0, m, n, cfg, x2d.device.index or 0, arch,
                                           emulate_mma, force_sw_cvt)
    args = (ptr(tiles), ptr(qw.scale), ptr(xq), ptr(xs), ptr(bias), ptr(y), m, n, k,
            DTYPE_CODE[bias.dtype] if bias is not None else 0, DTYPE_CODE[out_dtype])
    _driver.launch(kernel, grid, block, args, smem, pdl=pdl)
    return y

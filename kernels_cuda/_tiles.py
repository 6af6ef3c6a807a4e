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
through the GEMV launchers' `tiles=` argument (kernels_cuda/_launch.py; chosen from tables tuned on tiles, else at the
row-major GEMV's config where `helps`);
`qw.to(...)` drops them with the rest of the weight's cache.
"""

from __future__ import annotations

import math

import torch

from dispatch.decode_tiles import CACHE_KEY as TILES_KEY
from dispatch.errors import FormatError, UnsupportedError
from dispatch.formats import Act, Format, QWeight

from ._launch import TILE_K, TILE_ROWS as ROW_MULTIPLE, tiles_nbytes
from .configs import THREE_CTAS_AT_RING_1, GemvConfig


CHUNK_BYTES = 64 << 20  # transient memory of tile_codes beyond its output: one padded chunk of rows


def tile_codes(codes: torch.Tensor) -> torch.Tensor:
    """[N, K] e4m3 (or uint8) codes -> the tiled layout, flat uint8 (N and K zero-padded to ROW_MULTIPLE and 128).
    Row tiles are the outermost dimension, so it is built ROW_MULTIPLE-row chunks at a time: at most ~CHUNK_BYTES of
    transient memory beyond the output, as the quantizers bound theirs."""
    n, k = codes.shape
    np_, kp = math.ceil(n / ROW_MULTIPLE) * ROW_MULTIPLE, math.ceil(k / TILE_K) * TILE_K
    src = codes.view(torch.uint8)
    out = torch.empty(tiles_nbytes(n, k), dtype=torch.uint8, device=codes.device)
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


def tiles_of(qw: QWeight) -> torch.Tensor:
    """The weight's decode tiles, for the `tiles=` argument of _launch.w8a16_gemv / w8a8_gemv (which check the layout's
    size); FormatError when it has none."""
    tiles = qw._cache.get(TILES_KEY)
    if tiles is None:
        raise FormatError(f"{qw!r} has no decode tiles; make them with dispatch.add_decode_tiles(qw)")
    return tiles

"""`add_decode_tiles(qw)`: opt in, per weight, to the CUDA decode GEMVs' tiled weight layout (a second copy of the codes).

At decode sizes (M <= 32) the CUDA GEMVs stream the whole weight once per call; with a copy of the codes laid out tile
by tile they read 512 contiguous bytes per warp load instead of eight 64-byte pieces of eight rows. On the H200
(session 22, docs/perf/h200_s22_2026-11-30.md) the same kernel at the same config took 0.79-0.99x the time in 157 of
168 decode cells, bit-identical; the dispatched path with tiles (the tables' configs, which were tuned without them)
reached >= 1.6x bf16 in 13 of 16 W8A16 cells of the four speed shapes at M = 1, 16 (9 without).

The cost is memory: N x K more bytes for the weight (rows padded to 32, K to 128), +100 % of its codes, because the
prefill routes keep reading the row-major codes. Call it at load time, for the layers whose decode latency is worth
it, before sizing a KV cache: the copy is made here, never on a first token. Moving the weight (`qw.to(...)`) drops it.
The tiles are a snapshot of the codes: code edited in place afterwards (a weight update) needs a new QWeight.

    qw = dispatch.add_decode_tiles(dispatch.quantize(w.cuda(), "fp8_row"))
    y = dispatch.linear(x, qw)   # decode picks from the tables as before; a CUDA GEMV pick reads the tiles
"""

from __future__ import annotations

from .errors import BackendUnavailable
from .formats import QWeight


def add_decode_tiles(qw: QWeight) -> QWeight:
    """Make and keep `qw`'s decode tiles (once; on its CUDA device); returns `qw`. Raises UnsupportedError for a CPU
    weight or K % 16 != 0, BackendUnavailable without the CUDA backend (CuPy)."""
    try:
        from kernels_cuda import _tiles  # noqa: PLC0415 (optional backend, imported on first use)
    except ImportError as e:  # CuPy missing: the GEMVs that would read the tiles cannot run either
        raise BackendUnavailable(f"decode tiles serve the CUDA backend, which is not importable here: {e}") from e
    return _tiles.add_decode_tiles(qw)

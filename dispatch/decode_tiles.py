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
    y = dispatch.linear(x, qw)   # decode picks from the tables tuned on tiles (tuning_db/*_decode_tiles.yaml)

Selection (dispatch.select): a weight with tiles is a Problem with decode_tiles=True. Its exact key in a table tuned on
tiles (`weight_layout: decode_tiles`, written by `tools.autotune --decode-tiles`) decides first; else the row-major
chain decides, and its CUDA GEMV pick is handed to the GEMV that reads the tiles, at the same config, where that helps
(kernels_cuda._tiles.helps). Adding tiles drops the weight's plans, so the next call selects again.
"""

from __future__ import annotations

import fnmatch
from typing import Sequence

import torch

from .errors import BackendUnavailable
from .formats import QWeight

# Where a weight keeps its tiles (QWeight._cache, dropped with the rest of the cache by QWeight.to) and the name of the
# layout in tuned tables (dispatch.tables: `weight_layout`).
CACHE_KEY = "kernels_cuda.decode_tiles"
LAYOUT = "decode_tiles"


def has_decode_tiles(qw: QWeight) -> bool:
    return CACHE_KEY in qw._cache


def add_decode_tiles(qw: QWeight | torch.nn.Module, *, include: Sequence[str] = ("*",),
                     exclude: Sequence[str] = ()) -> QWeight | torch.nn.Module:
    """Make and keep `qw`'s decode tiles (once; on its CUDA device); returns `qw`. Raises UnsupportedError for a CPU
    weight or K % 16 != 0, BackendUnavailable without the CUDA backend (CuPy).

    Given a model (an nn.Module, after dispatch.quantize_model and the move to the GPU): every FP8Linear whose dotted
    name matches an `include` glob and no `exclude` glob gets tiles, except layers with K % 16 != 0 (no GEMV reads
    them). The model's `fp8dispatch_decode_tiles` lists the layers given tiles and `fp8dispatch_decode_tiles_bytes`
    their total size. Each layer keeps the choice (FP8Linear.add_decode_tiles): a later model.to("cuda") or
    load_state_dict makes its tiles again from the codes it then holds."""
    if isinstance(qw, torch.nn.Module):
        return _add_to_model(qw, include, exclude)
    if not isinstance(qw, QWeight):
        raise TypeError(f"add_decode_tiles takes a QWeight or a model of FP8Linear layers, got {type(qw).__name__}")
    try:
        from kernels_cuda import _tiles  # noqa: PLC0415 (optional backend, imported on first use)
    except ImportError as e:  # CuPy missing: the GEMVs that would read the tiles cannot run either
        raise BackendUnavailable(f"decode tiles serve the CUDA backend, which is not importable here: {e}") from e
    had = has_decode_tiles(qw)
    _tiles.add_decode_tiles(qw)
    if not had:  # plans were chosen for the row-major codes alone: choose again (a CUDA graph captured before keeps them)
        from .linear import PLANS_KEY  # noqa: PLC0415 (linear imports this module's users)

        qw._cache.pop(PLANS_KEY, None)
    return qw


def _add_to_model(model: torch.nn.Module, include: Sequence[str], exclude: Sequence[str]) -> torch.nn.Module:
    from .nn import FP8Linear  # noqa: PLC0415 (nn imports the dispatcher, which imports this module)

    if isinstance(include, str) or isinstance(exclude, str):
        raise TypeError("include/exclude take a list of glob patterns, e.g. exclude=['lm_head']")

    def chosen(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in include) and not any(fnmatch.fnmatchcase(name, p)
                                                                               for p in exclude)

    done, nbytes = [], 0
    for name, mod in model.named_modules():
        if isinstance(mod, FP8Linear) and chosen(name) and mod.in_features % 16 == 0:
            mod.add_decode_tiles()
            done.append(name)
            nbytes += mod.qweight._cache[CACHE_KEY].numel()
    model.fp8dispatch_decode_tiles = done
    model.fp8dispatch_decode_tiles_bytes = nbytes
    return model

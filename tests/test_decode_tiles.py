"""Decode tiles (kernels_cuda/_tiles.py, dispatch.add_decode_tiles) on the CPU: the layout the tiled GEMV loads read
(csrc/skinny_common.cuh fp8d_load_weight_step<MT, true>), the typed errors, and the tiled modules compiling through
NVRTC without spills. The GPU half (bit-identical to the row-major codes, dispatch, graphs) is in
tests/test_cuda_kernels.py."""

from __future__ import annotations

import pytest
import torch

import dispatch
from dispatch.errors import FormatError, UnsupportedError


def _tiles():
    pytest.importorskip("cupy")
    from kernels_cuda import _tiles

    return _tiles


@pytest.mark.parametrize("chunk", [None, 1])
@pytest.mark.parametrize("n,k", [(16, 128), (40, 272), (300, 1040), (33, 16), (64, 4096)])
def test_tiled_layout_is_what_the_kernel_loads(n, k, chunk, monkeypatch):
    """Lane (g, t) of a warp reads, for row tile T, K step S, half h and chunk q, the 16 bytes at
    ((T * steps + S) * 2048) + (2 h + q) * 512 + (4 g + t) * 16: they must be the row-major codes
    [16 T + 8 h + g, 128 S + 64 q + 16 t : + 16], zero past N or K; built in one chunk or ROW_MULTIPLE rows at a
    time."""
    tl = _tiles()
    if chunk:  # the smallest chunk: ROW_MULTIPLE rows at a time (the chunk loop and its last, partial chunk)
        monkeypatch.setattr(tl, "CHUNK_BYTES", chunk)
    codes = torch.randint(0, 256, (n, k), dtype=torch.uint8, generator=torch.Generator().manual_seed(n * k))
    tiles = tl.tile_codes(codes)
    steps, rows = -(-k // 128), -(-n // tl.ROW_MULTIPLE) * tl.ROW_MULTIPLE
    assert tiles.dtype == torch.uint8 and tiles.numel() == rows * steps * 128
    padded = torch.zeros(rows, steps * 128, dtype=torch.uint8)
    padded[:n, :k] = codes
    # every chunk at once: index arrays over (T, S, h, q, g, t), then compare the 16-byte rows
    T, S, h, q, g, t = torch.meshgrid(*(torch.arange(v) for v in (rows // 16, steps, 2, 2, 8, 4)), indexing="ij")
    off = ((T * steps + S) * 2048 + (2 * h + q) * 512 + (4 * g + t) * 16).reshape(-1)
    row, col = (16 * T + 8 * h + g).reshape(-1), (128 * S + 64 * q + 16 * t).reshape(-1)
    got = tiles.view(-1, 16)[off // 16]
    want = padded.view(rows, steps * 8, 16)[row, col // 16]
    assert torch.equal(got, want)


def test_tiles_refuse_what_they_cannot_serve():
    tl = _tiles()
    qw = dispatch.quantize(torch.randn(64, 256), "fp8_row")
    with pytest.raises(UnsupportedError, match="on cpu"):
        dispatch.add_decode_tiles(qw)
    assert tl.decode_tiles(qw) is None
    with pytest.raises(FormatError, match="no decode tiles"):
        tl.tiles_of(qw)
    from kernels_cuda import _launch

    with pytest.raises(FormatError, match="tiled layout of a \\[64, 256\\]"):
        _launch._check_tiles(torch.zeros(7, dtype=torch.uint8), qw)
    assert _launch._check_tiles(tl.tile_codes(qw.qdata), qw) is not None
    from dispatch.formats import Act, Format
    from kernels_cuda.configs import GemvConfig

    # one row tile, ring of 1: row-major there fits three CTAs per SM for fp8_row (not for mxfp8 or W8A8 fp8_block)
    assert not tl.helps(GemvConfig(8, 1, 1), Act.BF16, Format.FP8_ROW)
    assert not tl.helps(GemvConfig(4, 1, 1), Act.FP8, Format.FP8_ROW)
    assert tl.helps(GemvConfig(4, 1, 1), Act.BF16, Format.MXFP8) and tl.helps(GemvConfig(8, 1, 1), Act.FP8, Format.FP8_BLOCK)
    assert tl.helps(GemvConfig(8, 1, 2), Act.BF16, Format.FP8_ROW) and tl.helps(GemvConfig(4, 2, 1), Act.FP8, Format.FP8_ROW)


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90"])
def test_tiled_gemv_modules_compile_without_spills(arch):
    """The tiled loads add address registers: every (family, scale kind, token tile, row tiles, ring) the tiled variants
    can run (configs.fits_on_decode_tiles) still compiles under __launch_bounds__(256, 2) without local-memory spills.
    Per compiler: with NVRTC 13.0 (the GPU machine's; pyproject pins it) the W8A8 ring of 3 at M = 16 spills (session
    24), with 13.5 it does not."""
    _tiles()
    from kernels_cuda import _launch, compiler
    from kernels_cuda._kinds import ACTQ_CODE, DTYPE_CODE, SCALE_CODE
    from kernels_cuda.configs import MAX_UNROLL, GemvConfig, fits_on_decode_tiles
    from dispatch.formats import Format

    reason = compiler.nvrtc_unavailable_reason()
    if reason:
        pytest.skip(reason)
    kinds = [(False, SCALE_CODE[f], DTYPE_CODE[torch.bfloat16]) for f in (Format.FP8_ROW, Format.MXFP8)]
    kinds += [(True, code, 0) for code in ACTQ_CODE.values()]
    spilled = []
    for w8a8, code, xkind in kinds:
        for m in (1, 16):
            for cfg in (GemvConfig(8, mt, u) for mt in (1, 2) for u in range(1, MAX_UNROLL + 1)):
                if not fits_on_decode_tiles(cfg, m, w8a8):
                    continue
                name, _, d = _launch.gemv_module(w8a8, code, xkind, m, cfg, tiled=True)
                res = compiler.ptxas_resources(compiler.compile_module(name, arch, dict(d)).log)
                if res.get("spill_bytes", 0):
                    spilled.append((w8a8, code, m, cfg, res))
    assert not spilled


def test_tiled_variants_offer_only_the_configs_that_fit():
    """The W8A8 GEMV on tiles keeps a ring of 2 at two token tiles and one row tile (the row-major module's 3 spilled
    there with the GPU machine's NVRTC): its configs, its default and the hand-over from a row-major pick agree."""
    _tiles()
    from dispatch import registry
    from dispatch.formats import Act, Format
    from dispatch.problem import Problem
    from dispatch.target import Target
    from kernels_cuda.configs import GemvConfig, fits_on_decode_tiles

    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    ring3 = GemvConfig(8, 1, 3)
    assert ring3.fits(16) and not fits_on_decode_tiles(ring3, 16, True) and fits_on_decode_tiles(ring3, 16, False)
    assert fits_on_decode_tiles(GemvConfig(8, 1, 4), 1, True) and fits_on_decode_tiles(GemvConfig(8, 1, 2), 16, True)
    w8a8 = registry.get("cuda.w8a8_gemv_tiles")
    row_major = registry.get("cuda.w8a8_gemv")
    for fmt in (Format.FP8_BLOCK, Format.FP8_TENSOR, Format.FP8_ROW):
        p = Problem(fmt, Act.FP8, 16, 4096, 4096, decode_tiles=True)
        offered = list(w8a8.configs(p, t))
        assert ring3 in row_major.configs(p, t) and ring3 not in offered and offered
        assert all(fits_on_decode_tiles(c, 16, True) for c in offered)
        assert fits_on_decode_tiles(w8a8.default_config(p, t), 16, True)
        assert not w8a8.tiles_help(ring3, p)
        assert w8a8.tiles_help(GemvConfig(8, 1, 2), p)
    p16 = Problem(Format.FP8_ROW, Act.BF16, 16, 4096, 4096, decode_tiles=True)
    assert ring3 in registry.get("cuda.w8a16_gemv_tiles").configs(p16, t)


def _with_tiles(qw):
    """The tiles add_decode_tiles would make on the GPU, built with torch on the CPU (selection needs no device)."""
    tl = _tiles()
    qw._cache[tl.TILES_KEY] = tl.tile_codes(qw.qdata)
    return qw


def test_explain_says_whether_the_decode_tiles_are_read():
    """A weight with decode tiles: a key of the shipped table tuned on tiles takes its entry; a key in no such table
    takes the row-major chain's pick, handed to the GEMV's variant on tiles where `helps` says so at the chosen config;
    explain() says which reads what."""
    tl = _tiles()
    from dispatch.target import Target

    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    qw = dispatch.quantize(torch.randn(4096, 4096), "fp8_row")
    e = dispatch.explain(1, _with_tiles(qw), target=t)
    assert e.decision.source == "table" and e.decision.detail.endswith("tuned on decode tiles")
    assert "_decode_tiles.yaml" in e.decision.detail
    note = next(n for n in e.notes if "decode tiles" in n)
    reads = registry_get(e.decision.candidate_id).reads_decode_tiles
    assert ("reads them" in note) == reads and ("measured it faster" in note) == (not reads)

    qw = dispatch.quantize(torch.randn(2112, 7168), "fp8_row")  # in no table: the row-major chain decides
    e = dispatch.explain(1, qw, target=t)
    assert e.decision.candidate_id == "cuda.w8a16_gemv" and not any("decode tiles" in n for n in e.notes)
    row_cfg = e.decision.config
    e = dispatch.explain(1, _with_tiles(qw), target=t)
    note = next(n for n in e.notes if "decode tiles" in n)
    used = tl.helps(row_cfg, qw.act, qw.format)
    assert e.decision.config == row_cfg and "no entry tuned on decode tiles" in e.decision.detail
    assert e.decision.candidate_id == ("cuda.w8a16_gemv_tiles" if used else "cuda.w8a16_gemv")
    assert ("reads them" in note) == used and ("reads the row-major codes" in note) == (not used)
    assert note in str(e)
    e = dispatch.explain(256, qw, target=t)  # prefill: no variant on tiles, the row-major pick stands
    assert not registry_get(e.decision.candidate_id).reads_decode_tiles
    assert "has no variant on tiles" in next(n for n in e.notes if "decode tiles" in n)


def registry_get(cid):
    from dispatch import registry

    return registry.get(cid)


@pytest.mark.parametrize("act", ["bf16", "fp8"])
def test_gemv_candidates_and_their_variants_on_tiles_call_their_launchers(act, monkeypatch):
    """The row-major GEMV candidates never read the tiles (their tuned entries timed the codes); their variants always
    do and support only weights with tiles (launchers replaced by recorders: no GPU needed)."""
    tl = _tiles()
    from dispatch.problem import Problem
    from dispatch.target import Target
    from kernels_cuda import _launch
    from kernels_cuda.candidates import CudaW8A16Gemv, CudaW8A16GemvTiles, CudaW8A8Gemv, CudaW8A8GemvTiles
    from kernels_cuda.configs import GemvConfig

    calls = []
    for name in ("w8a16_gemv", "w8a8_gemv"):  # recorders: the launcher and whether it was given the tiles
        monkeypatch.setattr(_launch, name, lambda *a, _n=name, tiles=None, **k: calls.append(
            (_n, tiles is not None and tiles is tl.decode_tiles(a[1]))))
    cand, variant = (CudaW8A16Gemv(), CudaW8A16GemvTiles()) if act == "bf16" else (CudaW8A8Gemv(), CudaW8A8GemvTiles())
    launcher = "w8a16_gemv" if act == "bf16" else "w8a8_gemv"
    row, tiled = (launcher, False), (launcher, True)
    assert cand.decode_tiles_variant == variant.id and variant.reads_decode_tiles and not cand.reads_decode_tiles
    qw = _with_tiles(dispatch.quantize(torch.randn(64, 256), "fp8_row", act=act))
    x = torch.randn(1, 256)
    for cfg in (GemvConfig(8, 1, 1), GemvConfig(8, 1, 2), GemvConfig(4, 2, 1)):
        cand.run(x, qw, None, None, torch.bfloat16, cfg)
        variant.run(x, qw, None, None, torch.bfloat16, cfg)
    assert calls == [row, tiled] * 3
    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    p = Problem.of((1, 256), qw)
    assert p.decode_tiles and variant.supports(p, t)
    no = variant.supports(Problem.of((1, 256), dispatch.quantize(torch.randn(64, 256), "fp8_row", act=act)), t)
    assert not no and "has none" in no.reason


def test_add_decode_tiles_drops_the_weights_plans(monkeypatch):
    """Plans chosen before the tiles existed would keep the row-major pick: add_decode_tiles drops them (once, when it
    makes the tiles)."""
    tl = _tiles()
    from dispatch.linear import PLANS_KEY

    monkeypatch.setattr(tl, "add_decode_tiles", lambda qw: _with_tiles(qw))
    qw = dispatch.quantize(torch.randn(64, 256), "fp8_row")
    dispatch.linear(torch.randn(2, 256, dtype=torch.bfloat16), qw)
    assert PLANS_KEY in qw._cache
    assert dispatch.add_decode_tiles(qw) is qw and PLANS_KEY not in qw._cache
    dispatch.linear(torch.randn(2, 256, dtype=torch.bfloat16), qw)
    assert dispatch.add_decode_tiles(qw) is qw and PLANS_KEY in qw._cache  # tiles already there: plans kept


def test_add_decode_tiles_to_a_model_by_layer_name(monkeypatch):
    """A quantized model: every FP8Linear matching include and not exclude gets tiles (K % 16 != 0 layers are left
    out), named in fp8dispatch_decode_tiles with their size; the tiles are what each layer's weight then reads."""
    tl = _tiles()
    monkeypatch.setattr(tl, "add_decode_tiles", lambda qw: _with_tiles(qw))
    model = torch.nn.Sequential(torch.nn.Linear(256, 64), torch.nn.Linear(64, 40), torch.nn.Linear(40, 24),
                                torch.nn.Linear(24, 256))
    dispatch.quantize_model(model, "fp8_row")
    assert dispatch.add_decode_tiles(model, exclude=["3"]) is model
    assert model.fp8dispatch_decode_tiles == ["0", "1"]  # "2" has K = 40, "3" is excluded
    assert model.fp8dispatch_decode_tiles_bytes == 64 * 256 + 64 * 128  # rows padded to 32, K to 128
    for i, layer in enumerate(model):
        assert (tl.decode_tiles(layer.qweight) is not None) == (i < 2) == layer.decode_tiles
    assert "decode_tiles=True" in repr(model[0]) and "decode_tiles" not in repr(model[3])
    assert not any("tiles" in k for k in model.state_dict())  # a derived copy: never saved
    model.to("cpu")  # a rebuild off the GPU: no tiles there, the layer keeps its choice for the next move to CUDA
    assert tl.decode_tiles(model[0].qweight) is None and model[0].decode_tiles
    with pytest.raises(TypeError, match="list of glob"):
        dispatch.add_decode_tiles(model, include="0")
    with pytest.raises(TypeError, match="QWeight or a model"):
        dispatch.add_decode_tiles(torch.zeros(3))


def test_explain_offers_decode_tiles_where_the_table_tuned_on_them_is_faster(monkeypatch):
    """A decode-size weight without tiles: explain() names what the table tuned on tiles measured for its key, with the
    memory it costs, when that entry is at least TILES_OFFER_RATIO faster than the pick's; nothing at prefill sizes,
    nothing below the ratio, and no offer once the weight has tiles."""
    import importlib

    from dispatch.target import Target

    explain_mod = importlib.import_module("dispatch.explain")  # (dispatch.explain is the function)

    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    qw = dispatch.quantize(torch.randn(4096, 4096), "mxfp8")  # a key whose tiled entry is well past the ratio
    e = dispatch.explain(1, qw, target=t)
    offer = next(n for n in e.notes if n.startswith("dispatch.add_decode_tiles(qw)"))
    key = (qw.format, qw.act, 4096, 4096, 1)
    here = next(x for _, _, x in e.tables.exact(key) if x.impl == e.decision.candidate_id)
    there = next(x for _, _, x in e.tables.exact(key, "decode_tiles"))
    assert there.us <= explain_mod.TILES_OFFER_RATIO * here.us
    assert f"{there.us:g} us" in offer and f"{here.us:g} us" in offer and "+17 MB" in offer
    assert not any("add_decode_tiles" in n for n in dispatch.explain(64, qw, target=t).notes)
    monkeypatch.setattr(explain_mod, "TILES_OFFER_RATIO", there.us / here.us - 1e-3)
    assert not any("add_decode_tiles(qw)" in n for n in dispatch.explain(1, qw, target=t).notes)
    monkeypatch.undo()
    notes = dispatch.explain(1, _with_tiles(qw), target=t).notes
    assert not any(n.startswith("dispatch.add_decode_tiles(qw)") for n in notes) and any("reads" in n for n in notes)

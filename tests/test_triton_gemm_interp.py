"""Prefill GEMM kernels under the Triton CPU interpreter (TRITON_INTERPRET=1): indexing, masks, scale layouts.

NOT a GPU validation. These run the interpreter-safe path only: fp32 `input_precision="ieee"` dots instead
of bf16/fp8 tensor-core dots (the interpreter multiplies the raw bits of bf16 dots), and no pipelining or
layouts. They check the arithmetic of every scale layout, partial tiles (M, N, K not multiples of the
blocks), grouped program order, swap_ab, bias and the typed errors. The GPU twin is
tests/test_triton_gemm_gpu.py.

This module runs in a subprocess started by tests/test_triton_gemm.py with TRITON_INTERPRET=1 (the variable
must be set before triton is imported); collected in a normal session it skips itself.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="interpreter tests; run through tests/test_triton_gemm.py (sets TRITON_INTERPRET=1)")

import dispatch  # noqa: E402
from dispatch import reference  # noqa: E402
from dispatch.errors import FormatError, UnsupportedError  # noqa: E402

W8A16_FORMATS = ["fp8_tensor", "fp8_row", "fp8_block", "mxfp8"]
W8A8_FORMATS = ["fp8_tensor", "fp8_row", "fp8_block"]


def _launch():
    from kernels_triton import _gemm_launch
    return _gemm_launch


def _cfg(**kw):
    from kernels_triton._gemm_config import GemmConfig
    return GemmConfig(**kw)


def _weight(n: int, k: int, g: torch.Generator) -> torch.Tensor:
    """Varied magnitudes per row and per 32/128 column range, so every scale differs (uniform randn would
    give near-identical scales and hide indexing bugs)."""
    w = torch.randn(n, k, generator=g)
    w = w * torch.exp2(torch.randint(-6, 7, (n, 1), generator=g).float())
    w = w * torch.exp2(torch.randint(-4, 5, (1, (k + 31) // 32), generator=g).float()).repeat_interleave(32, 1)[:, :k]
    if n > 2:
        w[1] = 0.0  # an all-zero row: floor scales, zero codes
    return w


def _x(m: int, k: int, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    x = torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-3, 4, (m, 1), generator=g).float())
    return x.to(dtype)


def _close(y: torch.Tensor, x: torch.Tensor, qw, bias, out_dtype) -> None:
    """Elementwise bound relative to sum |x||w| (fp32 summation order and where the scale is applied
    differ from the reference; an indexing error is O(1) of that sum)."""
    r = reference.linear(x, qw, bias, out_dtype=torch.float32)
    xv = reference.activation_values(x, qw).abs()
    bound = 4e-5 * (xv @ dispatch.dequantize(qw).abs().T) + 1e-30
    if bias is not None:
        bound = bound + 1e-6 * bias.float().abs()
    yf = y.float()
    if out_dtype != torch.float32:
        bound = bound + 2.0 ** -7 * r.abs()  # one rounding of the output
    err = (yf - r).abs()
    bad = ~(err <= bound)
    assert not bool(bad.any()), (f"{int(bad.sum())} of {bad.numel()} wrong; first at "
                                 f"{[int(i) for i in bad.nonzero()[0]]}: {yf[bad][:4]} vs {r[bad][:4]}")


# Shrinking re-runs the interpreter hundreds of times (minutes); the failing example is printed anyway.
_NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


@pytest.mark.parametrize("fmt", W8A16_FORMATS)
@pytest.mark.parametrize("block_k", [32, 64, 128])
@pytest.mark.parametrize("swap,tma,split", [(False, False, 1), (True, False, 1), (True, True, 1), (False, False, 3),
                                            (True, True, 3)])
def test_w8a16_every_layout_and_k_tile(fmt, block_k, swap, tma, split):
    """Fixed partial shape crossing 128-blocks along N and K (N = 150, K = 300, or 304 with TMA: 16-byte
    aligned rows, so the descriptor path really runs) and a K tile holding 1, 2 or 4 mx groups: every
    layout's scale indexing, deterministically. split = 3 splits K's 3-10 tiles unevenly (the last split
    short or empty) with the bias added once, in the reduction."""
    g = torch.Generator().manual_seed(block_k + 7 * swap)
    k = 304 if tma else 300
    qw = dispatch.quantize(_weight(150, k, g), fmt, act="bf16")
    x = _x(37, k, torch.bfloat16, g)
    bias = torch.randn(150, generator=g).to(torch.bfloat16) if split > 1 else None
    cfg = _cfg(block_m=16, block_n=64, block_k=block_k, group_m=2, num_warps=4, num_stages=1, swap_ab=swap,
               tma=tma, split_k=split)
    if swap and fmt == "fp8_block":
        # Rejected by GemmConfig.legal_for_w8a16 (wrong on the H200); the launcher must refuse it.
        with pytest.raises(UnsupportedError, match="swap_ab"):
            _launch().w8a16_gemm(x, qw, bias, torch.float32, cfg, hw_fp8=False, dot_f32=True)
        return
    y = _launch().w8a16_gemm(x, qw, bias, torch.float32, cfg, hw_fp8=False, dot_f32=True)
    _close(y, x, qw, bias, torch.float32)


@pytest.mark.parametrize("fmt", W8A8_FORMATS)
@pytest.mark.parametrize("block_k", [32, 64, 128])
@pytest.mark.parametrize("tma,split", [(False, 1), (True, 1), (False, 3), (True, 0)])
def test_w8a8_every_layout_and_k_tile(fmt, block_k, tma, split):
    """K = 304 keeps rows 16-byte aligned, so tma=True really takes the descriptor path (emulated by the
    interpreter: zero-filled out-of-bounds boxes); K = 300 exercises the pointer fallback of tma=True.
    split: 3 = uneven K split, 0 = chosen at launch (8 pretend SMs under the interpreter)."""
    g = torch.Generator().manual_seed(block_k)
    for k in (304, 300) if tma else (300,):
        qw = dispatch.quantize(_weight(150, k, g), fmt, act="fp8")
        x = _x(37, k, torch.bfloat16, g)
        bias = torch.randn(150, generator=g) if split != 1 else None
        xq, xs = dispatch.quantize_activation(x, qw.act_granularity)
        cfg = _cfg(block_m=16, block_n=64, block_k=block_k, group_m=2, num_warps=4, num_stages=1, tma=tma,
                   split_k=split)
        y = _launch().w8a8_gemm(xq, xs, qw, bias, torch.float32, cfg, hw_fp8=False, dot_f32=True)
        _close(y, x, qw, bias, torch.float32)


tiles = st.sampled_from([(16, 16, 32), (16, 32, 32), (32, 16, 64), (16, 64, 32), (32, 32, 128)])


@settings(max_examples=12, phases=_NO_SHRINK)
@given(m=st.integers(1, 40), n=st.integers(1, 90), k=st.integers(1, 300), fmt=st.sampled_from(W8A16_FORMATS),
       tile=tiles, group_m=st.sampled_from([1, 2, 3]), swap=st.booleans(), hw=st.booleans(),
       x_dtype=st.sampled_from([torch.bfloat16, torch.float16]), out_dtype=st.sampled_from([torch.float32, torch.bfloat16]),
       has_bias=st.booleans(), split=st.sampled_from([1, 0, 2, 5]), seed=st.integers(0, 2**16))
def test_w8a16_matches_reference(m, n, k, fmt, tile, group_m, swap, hw, x_dtype, out_dtype, has_bias, split, seed):
    g = torch.Generator().manual_seed(seed)
    qw = dispatch.quantize(_weight(n, k, g), fmt, act="bf16")
    x = _x(m, k, x_dtype, g)
    bias = torch.randn(n, generator=g).to(x_dtype) if has_bias else None
    bm, bn, bk = tile
    if fmt == "mxfp8" and x_dtype == torch.float16:
        bk = 32  # 2^e multiplies 32-deep partial products (legal_for_w8a16)
    if fmt == "fp8_block" or (fmt == "mxfp8" and x_dtype == torch.float16):
        swap = False  # swap_ab with a per-K-tile scale is rejected (legal_for_w8a16: wrong on the H200)
    cfg = _cfg(block_m=bm, block_n=bn, block_k=bk, group_m=group_m, num_warps=4, num_stages=1, swap_ab=swap,
               split_k=split)
    y = _launch().w8a16_gemm(x, qw, bias, out_dtype, cfg, hw_fp8=hw, dot_f32=True)
    assert y.shape == (m, n) and y.dtype == out_dtype
    _close(y, x, qw, bias, out_dtype)


@settings(max_examples=10, phases=_NO_SHRINK)
@given(m=st.integers(1, 40), n=st.integers(1, 90), k=st.integers(1, 300), fmt=st.sampled_from(W8A8_FORMATS),
       tile=tiles, group_m=st.sampled_from([1, 2, 3]), hw=st.booleans(), has_bias=st.booleans(),
       tma=st.booleans(), split=st.sampled_from([1, 0, 2, 5]), seed=st.integers(0, 2**16))
def test_w8a8_matches_reference(m, n, k, fmt, tile, group_m, hw, has_bias, tma, split, seed):
    g = torch.Generator().manual_seed(seed)
    qw = dispatch.quantize(_weight(n, k, g), fmt, act="fp8")
    x = _x(m, k, torch.bfloat16, g)
    bias = torch.randn(n, generator=g) if has_bias else None
    xq, xs = dispatch.quantize_activation(x, qw.act_granularity)
    bm, bn, bk = tile
    cfg = _cfg(block_m=bm, block_n=bn, block_k=bk, group_m=group_m, num_warps=4, num_stages=1, tma=tma,
               split_k=split)
    y = _launch().w8a8_gemm(xq, xs, qw, bias, torch.float32, cfg, hw_fp8=hw, dot_f32=True)
    _close(y, x, qw, bias, torch.float32)


def test_w8a8_fp8_dot_path_under_interpreter():
    """The hardware-fp8 variant with the real fp8 x fp8 tl.dot (exact under the interpreter, unlike bf16)."""
    g = torch.Generator().manual_seed(1)
    for fmt in W8A8_FORMATS:
        qw = dispatch.quantize(_weight(70, 300, g), fmt, act="fp8")
        x = _x(37, 300, torch.bfloat16, g)
        xq, xs = dispatch.quantize_activation(x, qw.act_granularity)
        cfg = _cfg(block_m=16, block_n=32, block_k=64, group_m=2, num_warps=4, num_stages=1)
        y = _launch().w8a8_gemm(xq, xs, qw, None, torch.float32, cfg, hw_fp8=True, dot_f32=False)
        _close(y, x, qw, None, torch.float32)


def test_w8a8_warp_specialized_and_wide_tiles_under_interpreter():
    """The kernel paths only the sm_90 spaces pick: warp_specialize (the explicit fresh-product promotion of
    tensor / token-row scales, real fp8 dots, TMA descriptors at K = 304) and fp8_block with 256-column tiles
    (a [BLOCK_N] weight-scale vector: two 128-blocks per tile, where <= 128 columns load one scalar). The
    interpreter ignores the specialization itself; the H200 tests run it."""
    g = torch.Generator().manual_seed(4)
    ws = _cfg(block_m=128, block_n=128, block_k=128, group_m=2, num_warps=4, num_stages=4, tma=True,
              warp_specialize=True)
    wide = _cfg(block_m=16, block_n=256, block_k=128, group_m=1, num_warps=4, num_stages=1)
    for fmt in W8A8_FORMATS:
        qw = dispatch.quantize(_weight(300, 304, g), fmt, act="fp8")
        x = _x(37, 304, torch.bfloat16, g)
        xq, xs = dispatch.quantize_activation(x, qw.act_granularity)
        for cfg, hw, f32 in ((ws, True, False), (wide, False, True)):
            y = _launch().w8a8_gemm(xq, xs, qw, None, torch.float32, cfg, hw_fp8=hw, dot_f32=f32)
            _close(y, x, qw, None, torch.float32)


def test_uint8_codes_accepted_for_w8a8_activations():
    """The sm_80 act-quant kernels return uint8 codes viewed as e4m3; both dtypes must work."""
    g = torch.Generator().manual_seed(2)
    qw = dispatch.quantize(_weight(33, 130, g), "fp8_block", act="fp8")
    x = _x(5, 130, torch.bfloat16, g)
    xq, xs = dispatch.quantize_activation(x, qw.act_granularity)
    cfg = _cfg(block_m=16, block_n=16, block_k=64, group_m=1, num_warps=4, num_stages=1)
    y = _launch().w8a8_gemm(xq.view(torch.uint8), xs, qw, None, torch.float32, cfg, hw_fp8=False, dot_f32=True)
    _close(y, x, qw, None, torch.float32)


def test_nan_activation_propagates_to_its_row_only():
    g = torch.Generator().manual_seed(3)
    cfg = _cfg(block_m=16, block_n=32, block_k=32, group_m=1, num_warps=4, num_stages=1)
    for fmt in W8A16_FORMATS:
        qw = dispatch.quantize(_weight(40, 100, g), fmt, act="bf16")
        x = _x(20, 100, torch.bfloat16, g)
        x[7, 13] = float("nan")
        y = _launch().w8a16_gemm(x, qw, None, torch.float32, cfg, hw_fp8=False, dot_f32=True)
        assert bool(torch.isnan(y[7]).all())
        assert bool(torch.isfinite(torch.cat([y[:7], y[8:]])).all())
    for fmt in W8A8_FORMATS:
        qw = dispatch.quantize(_weight(40, 100, g), fmt, act="fp8")
        x = _x(20, 100, torch.bfloat16, g)
        x[7, 13] = float("nan")
        xq, xs = dispatch.quantize_activation(x, qw.act_granularity)
        y = _launch().w8a8_gemm(xq, xs, qw, None, torch.float32, cfg, hw_fp8=False, dot_f32=True)
        r = reference.linear(x, qw, None, out_dtype=torch.float32)
        assert torch.equal(torch.isnan(y), torch.isnan(r)), fmt


def test_mx_extreme_exponents_are_exact():
    """e8m0 codes far from 127 (2^-110 .. 2^+100), one exponent per row so each output row is checked at
    its own scale: the bf16 prescale (code * 2^e) is exact while the product stays in bf16's normal range
    (|w| >= 2^-126); below that it loses bits, documented in kernels_triton/_gemm.py."""
    from dispatch.formats import QWeight
    g = torch.Generator().manual_seed(4)
    n, k = 8, 96
    codes = (torch.randn(n, k, generator=g) * 50).clamp(-448, 448).to(torch.float8_e4m3fn)
    rows = torch.tensor([227, 27, 127, 17, 132, 124, 200, 60], dtype=torch.uint8)
    e = rows[:, None].expand(n, k // 32).contiguous()
    qw = QWeight("mxfp8", "bf16", codes, e.view(torch.float8_e8m0fnu))
    x = torch.randn(4, k, generator=g).to(torch.bfloat16)
    cfg = _cfg(block_m=16, block_n=16, block_k=32, group_m=1, num_warps=4, num_stages=1)
    for hw in (False, True):
        y = _launch().w8a16_gemm(x, qw, None, torch.float32, cfg, hw_fp8=hw, dot_f32=True)
        _close(y, x, qw, None, torch.float32)


def test_typed_errors():
    g = torch.Generator().manual_seed(5)
    L = _launch()
    qb = dispatch.quantize(_weight(40, 256, g), "fp8_block", act="bf16")
    x = _x(4, 256, torch.bfloat16, g)
    with pytest.raises(UnsupportedError, match="block_k must divide 128"):
        L.w8a16_gemm(x, qb, None, torch.float32, _cfg(block_m=16, block_n=16, block_k=256), hw_fp8=False, dot_f32=True)
    qm = dispatch.quantize(_weight(40, 256, g), "mxfp8")
    with pytest.raises(UnsupportedError, match="block_k must be 32"):
        L.w8a16_gemm(x.half(), qm, None, torch.float32, _cfg(block_m=16, block_n=16, block_k=64), hw_fp8=False,
                      dot_f32=True)
    with pytest.raises(FormatError, match="K = 256"):
        L.w8a16_gemm(x[:, :100], qb, None, torch.float32, _cfg(), hw_fp8=False, dot_f32=True)
    qa = dispatch.quantize(_weight(40, 256, g), "fp8_block", act="fp8")
    xq, xs = dispatch.quantize_activation(x, qa.act_granularity)
    with pytest.raises(FormatError, match="1x128 activation scales"):
        L.w8a8_gemm(xq, xs[:, :1], qa, None, torch.float32, _cfg(block_k=64), hw_fp8=False, dot_f32=True)
    with pytest.raises(UnsupportedError, match="swap_ab"):
        L.w8a8_gemm(xq, xs, qa, None, torch.float32, _cfg(block_k=64, swap_ab=True), hw_fp8=False, dot_f32=True)
    with pytest.raises(UnsupportedError, match="no W8A8 GEMM"):
        L.w8a8_gemm(xq, xs, qm, None, torch.float32, _cfg(block_k=64), hw_fp8=False, dot_f32=True)

"""Activation quantization (the bit-exact reference for every fused kernel), the linear reference, checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

import dispatch
from dispatch import FormatError, dequantize, from_checkpoint, quantize, quantize_activation, reference
from dispatch.activation import dequantize_activation

from oracle import codes_of, quant_codes, scale


@st.composite
def activations(draw):
    lead = draw(st.sampled_from([(1,), (3,), (2, 3), (17,)]))
    k = draw(st.sampled_from([1, 31, 127, 128, 129, 300, 576]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    x = torch.randn(*lead, k, generator=g) * torch.exp2(torch.randint(-8, 8, (*lead, 1), generator=g).float())
    if draw(st.booleans()):
        x[..., : k // 2] = 0
    return x.to(draw(st.sampled_from([torch.bfloat16, torch.float16, torch.float32])))


@given(x=activations())
def test_per_tensor_matches_oracle(x):
    codes, s = quantize_activation(x, "per_tensor")
    xf = x.float().numpy()
    want_s = scale(np.abs(xf).max())
    assert s.shape == () and s.item() == want_s
    np.testing.assert_array_equal(codes_of(codes), quant_codes(xf, want_s))


@given(x=activations())
def test_per_token_matches_oracle(x):
    codes, s = quantize_activation(x, "per_token")
    xf = x.float().numpy().reshape(-1, x.shape[-1])
    assert s.shape == (*x.shape[:-1], 1)
    for i, row in enumerate(xf):
        want = scale(np.abs(row).max())
        assert s.reshape(-1)[i].item() == want
        np.testing.assert_array_equal(codes_of(codes).reshape(-1, x.shape[-1])[i], quant_codes(row, want))


@given(x=activations())
def test_per_token_group_matches_oracle(x):
    codes, s = quantize_activation(x, "per_token_group_128")
    k = x.shape[-1]
    groups = math.ceil(k / 128)
    assert s.shape == (*x.shape[:-1], groups)
    xf = x.float().numpy().reshape(-1, k)
    c = codes_of(codes).reshape(-1, k)
    sf = s.reshape(-1, groups).numpy()
    for i in range(xf.shape[0]):
        for j in range(groups):
            seg = xf[i, j * 128:(j + 1) * 128]
            want = scale(np.abs(seg).max())
            assert sf[i, j] == want
            np.testing.assert_array_equal(c[i, j * 128:(j + 1) * 128], quant_codes(seg, want))


def test_activation_nan_inf_propagate_and_empty():
    x = torch.ones(2, 256)
    x[0, 3] = float("nan")
    x[1, 200] = float("inf")
    codes, s = quantize_activation(x, "per_token_group_128")
    deq = dequantize_activation(codes, s, "per_token_group_128")
    assert torch.isnan(s[0, 0]) and torch.isnan(deq[0, :128]).all() and torch.isfinite(deq[0, 128:]).all()
    assert torch.isinf(s[1, 1]) and torch.isnan(deq[1, 200])
    c0, s0 = quantize_activation(torch.zeros(0, 64), "per_tensor")
    assert c0.shape == (0, 64) and s0.item() > 0
    assert quantize_activation(torch.zeros(0, 64), "per_token")[1].shape == (0, 1)
    with pytest.raises(FormatError, match="granularity"):
        quantize_activation(x, "per_channel")
    with pytest.raises(FormatError, match="already"):
        quantize_activation(x.to(torch.float8_e4m3fn), "per_token")


# --- reference.linear ------------------------------------------------------------------------------------------
FORMAT_ACTS = [("fp8_block", "fp8"), ("fp8_block", "bf16"), ("fp8_tensor", "fp8"), ("fp8_tensor", "bf16"),
               ("fp8_row", "bf16"), ("fp8_row", "fp8"), ("mxfp8", "bf16")]


@pytest.mark.parametrize("fmt, act", FORMAT_ACTS)
def test_reference_semantics(fmt, act):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(192, 300, generator=g) * 0.05
    qw = quantize(w, fmt, act=act)
    x = torch.randn(2, 3, 300, generator=g).to(torch.bfloat16)
    bias = torch.randn(192, generator=g)
    y = reference.linear(x, qw, bias)
    assert y.shape == (2, 3, 192) and y.dtype == torch.bfloat16
    if act == "bf16":
        want = x.float() @ dequantize(qw).T + bias
    else:
        gran = {"fp8_block": "per_token_group_128", "fp8_tensor": "per_tensor", "fp8_row": "per_token"}[fmt]
        xq, xs = quantize_activation(x, gran)
        want = dequantize_activation(xq, xs, gran) @ dequantize(qw).T + bias
    torch.testing.assert_close(y, want.to(torch.bfloat16), rtol=0, atol=0)
    # close to the unquantized product (error of e4m3: ~2-3% per operand)
    full = x.float() @ w.T + bias
    assert float((y.float() - full).norm() / full.norm()) < 0.06
    assert reference.linear(x[:, :0], qw).shape == (2, 0, 192)
    assert reference.linear(x, qw, out_dtype=torch.float32).dtype == torch.float32


def test_reference_errors():
    qw = quantize(torch.randn(8, 64), "fp8_row")
    with pytest.raises(FormatError, match="K = 64"):
        reference.linear(torch.randn(2, 63), qw)
    with pytest.raises(FormatError, match="bias"):
        reference.linear(torch.randn(2, 64), qw, torch.randn(7))
    with pytest.raises(FormatError, match="QWeight"):
        reference.linear(torch.randn(2, 64), torch.randn(8, 64))


# --- from_checkpoint -------------------------------------------------------------------------------------------
def test_from_checkpoint_layouts_keep_bits():
    w = torch.randn(300, 576)
    for fmt in ["fp8_block", "fp8_tensor", "fp8_row", "mxfp8"]:
        qw = quantize(w, fmt)
        if fmt == "fp8_block":
            back = from_checkpoint(qw.qdata, weight_scale_inv=qw.scale)
        elif fmt == "fp8_tensor":
            back = from_checkpoint(qw.qdata, qw.scale.reshape(1))
        elif fmt == "fp8_row":
            back = from_checkpoint(qw.qdata.view(torch.uint8), qw.scale[:, None])
        else:
            back = from_checkpoint(qw.qdata, qw.scale.view(torch.uint8))
        assert back.format is qw.format
        torch.testing.assert_close(dequantize(back), dequantize(qw), rtol=0, atol=0)


def test_from_checkpoint_errors():
    qw = quantize(torch.randn(256, 256), "fp8_block")
    with pytest.raises(FormatError, match="exactly one"):
        from_checkpoint(qw.qdata)
    with pytest.raises(FormatError, match="describe fp8_block"):
        from_checkpoint(qw.qdata, weight_scale_inv=qw.scale, fmt="fp8_row")
    with pytest.raises(FormatError, match="cannot infer"):
        from_checkpoint(qw.qdata, torch.ones(3, 3))
    with pytest.raises(FormatError, match="fnuz"):
        from_checkpoint(qw.qdata.float().to(torch.float8_e4m3fnuz), torch.ones(()))
    with pytest.raises(FormatError, match="positive"):
        from_checkpoint(qw.qdata, torch.zeros(()))
    bad = qw.qdata.clone()
    bad.view(torch.uint8)[3, 4] = 0x7F
    with pytest.raises(FormatError, match=r"NaN code at \[3, 4\]"):
        from_checkpoint(bad, torch.ones(()))
    with pytest.raises(FormatError, match="255"):
        from_checkpoint(qw.qdata, torch.full((256, 8), 255, dtype=torch.uint8))


@pytest.mark.gpu
def test_quantize_transient_memory_on_gpu():
    """Quantizing one big weight allocates at most ~64 MB beyond its input and output."""
    w = torch.randn(28672, 4096, device="cuda", dtype=torch.bfloat16)
    for fmt in ["fp8_block", "fp8_tensor", "fp8_row", "mxfp8"]:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        qw = dispatch.quantize(w, fmt)
        torch.cuda.synchronize()
        out_bytes = qw.nbytes
        transient = torch.cuda.max_memory_allocated() - base - out_bytes
        assert transient <= 64 * 2**20 + 2**20, (fmt, transient / 2**20)
        del qw

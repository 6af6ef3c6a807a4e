"""HIP kernels on a ROCm gfx12 GPU (Radeon AI PRO R9700 / RX 9070): the checks that prove what CI cannot.

Skipped everywhere else (marked gpu, and skipped again unless the HIP runtime is usable on a gfx12
device), including the lent H200. Run on the card with:
    pytest -m gpu tests/test_hip_gpu.py
When every test here passes on a gfx1201 card, set kernels_hip.candidates.HARDWARE_VALIDATED = True.
"""

from __future__ import annotations

import pytest
import torch

import dispatch
from dispatch.formats import Act, ActGranularity, Format
from kernels_hip import _launch, compiler
from kernels_hip.configs import WmmaConfig, wmma_configs_for
from kernels_hip.format_table import hw_fp8


def _skip_reason() -> str | None:
    reason = compiler.runtime_unavailable_reason()
    if reason:
        return reason
    arch = _launch.device_arch(torch.cuda.current_device())
    hw = hw_fp8(arch)
    if hw is None or not hw.has_fp8_wmma:
        return f"needs a gfx12 GPU, this one is {arch}"
    return None


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))]

DEV = "cuda"
SHAPES = [(1, 256, 4096), (5, 200, 576), (16, 4096, 4096), (17, 1024, 14336), (32, 130, 4112)]


def _weight(n: int, k: int, fmt: Format, act: Act, seed: int) -> dispatch.QWeight:
    g = torch.Generator().manual_seed(seed)
    # varied block/row magnitudes, so a wrong scale index shows up (plain randn gives near-uniform scales)
    w = torch.randn(n, k, generator=g) * torch.exp(torch.randn(n, 1, generator=g)) * 0.02
    w[:, : min(k, 128)] *= 8.0
    return dispatch.quantize(w.to(DEV), fmt, act=act)


def _check(y: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    assert y.shape == ref.shape and y.dtype == ref.dtype
    err = (y.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)
    assert err < tol, f"relative error {err:.3e} >= {tol}"


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("xdt", [torch.bfloat16, torch.float16])
def test_w8a16_wmma_matches_reference(m, n, k, fmt, xdt):
    qw = _weight(n, k, fmt, Act.BF16, seed=m + n + k)
    x = torch.randn(m, k, device=DEV).to(xdt)
    bias = torch.randn(n, device=DEV).to(xdt)
    for cfg in wmma_configs_for(m):
        y = _launch.w8a16_wmma(x, qw, bias, None, cfg)
        _check(y, dispatch.reference.linear(x, qw, bias), 1e-2 if xdt == torch.bfloat16 else 2e-3)


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("fmt", [Format.FP8_BLOCK, Format.FP8_TENSOR, Format.FP8_ROW])
def test_w8a8_wmma_matches_reference(m, n, k, fmt):
    qw = _weight(n, k, fmt, Act.FP8, seed=7 * m + k)
    x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
    for cfg in wmma_configs_for(m):
        for out_dtype in (torch.bfloat16, torch.float32):
            y = _launch.w8a8_wmma(x, qw, None, out_dtype, cfg)
            # same quantized activations as the reference: only fp32 summation order differs
            _check(y, dispatch.reference.linear(x, qw, out_dtype=out_dtype), 1e-2)


@pytest.mark.parametrize("g", list(ActGranularity))
@pytest.mark.parametrize("m,k", [(1, 4096), (3, 129), (16, 576), (600, 1024)])
@pytest.mark.parametrize("xdt", [torch.bfloat16, torch.float16, torch.float32])
def test_act_quant_bit_identical(g, m, k, xdt):
    x = (torch.randn(m, k, device=DEV) * torch.logspace(-3, 3, k, device=DEV)).to(xdt)
    x[0, 0] = 0.0
    codes, scales = _launch.quantize_activation(x, g)
    ref_codes, ref_scales = dispatch.quantize_activation(x, g)
    assert torch.equal(scales, ref_scales)  # IEEE division and NaN rules: bit-identical
    assert torch.equal(codes, ref_codes.view(torch.uint8))


def test_nan_in_activations_propagates():
    qw = _weight(64, 256, Format.FP8_ROW, Act.BF16, 0)
    x = torch.randn(2, 256, device=DEV, dtype=torch.bfloat16)
    x[1, 3] = float("nan")
    y = _launch.w8a16_wmma(x, qw)
    assert y[1].isnan().all() and not y[0].isnan().any()


def test_graph_capture_and_current_stream():
    qw = _weight(4096, 4096, Format.FP8_BLOCK, Act.FP8, 1)
    x = torch.randn(4, 4096, device=DEV, dtype=torch.bfloat16)
    y0 = _launch.w8a8_wmma(x, qw)  # compile + load outside the capture
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            y = _launch.w8a8_wmma(x, qw)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, y0)


def test_unaligned_x_view_is_handled():
    qw = _weight(256, 4096, Format.MXFP8, Act.BF16, 2)
    buf = torch.randn(4 * 4096 + 8, device=DEV, dtype=torch.bfloat16)
    x = buf[8:].view(4, 4096)  # 16-byte aligned (8 * 2 bytes) -> try an odd offset too
    x_odd = buf[1:1 + 4 * 4096].view(4, 4096)
    for xx in (x, x_odd):
        _check(_launch.w8a16_wmma(xx, qw, config=WmmaConfig()), dispatch.reference.linear(xx, qw), 1e-2)

"""The fused Triton weight quantizer: bit-identical to the torch-ops reference quantizer."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import dispatch
from conftest import REPO


def test_interpreter_software_path_matches_torch_quantizer():
    """CPU, Triton interpreter, software e4m3 encode: a check of the kernel's logic, NOT a GPU validation."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, str(REPO / "tests/scripts/weight_quant_interp.py")], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("hw_fp8", [True, False])
def test_gpu_kernel_bits_equal_torch_path(hw_fp8):
    from dispatch.formats import Format, MXScaleMode
    from kernels_triton.weight_quant import quantize_weight

    g = torch.Generator(device="cuda").manual_seed(0)
    for n, k in [(28672 // 8, 4096), (130, 576), (1, 33), (257, 129)]:
        w = torch.randn(n, k, device="cuda", generator=g)
        w = (w * torch.exp2(torch.randint(-12, 12, (n, 1), device="cuda", generator=g).float())).to(torch.bfloat16)
        w[0, : min(k, 64)] = 0
        for fmt in Format:
            for mode in (MXScaleMode.RCEIL, MXScaleMode.FLOOR) if fmt is Format.MXFP8 else (MXScaleMode.RCEIL,):
                q, s, bad = quantize_weight(w, fmt, mode, hw_fp8=hw_fp8)
                os.environ["FP8DISPATCH_QUANTIZER"] = "torch"
                try:
                    ref = dispatch.quantize(w, fmt, mx_scale_mode=mode)
                finally:
                    del os.environ["FP8DISPATCH_QUANTIZER"]
                cpu_ref = dispatch.quantize(w.cpu(), fmt, mx_scale_mode=mode)
                assert torch.equal(ref.qdata.view(torch.uint8).cpu(), cpu_ref.qdata.view(torch.uint8))
                assert torch.equal(q.view(torch.uint8), ref.qdata.view(torch.uint8)), (fmt, mode, n, k)
                assert torch.equal(s.reshape(-1).view(torch.uint8), ref.scale.reshape(-1).view(torch.uint8))
                assert int(bad) == 0


@pytest.mark.gpu
def test_gpu_nonfinite_weight_reports_location():
    w = torch.randn(1000, 512, device="cuda")
    w[777, 5] = float("nan")
    for fmt in ["fp8_block", "fp8_tensor", "fp8_row", "mxfp8"]:
        with pytest.raises(dispatch.FormatError, match=r"\[777, 5\]"):
            dispatch.quantize(w, fmt)

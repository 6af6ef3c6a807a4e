"""Triton backend of fp8dispatch: W8A16 / W8A8 decode (GEMV, split-K) and prefill (GEMM) kernels, and fused
dynamic activation quantization, for CUDA sm_80 / sm_89 / sm_90 and ROCm gfx1201.

Import-safe: importing this package imports neither triton nor torch.cuda and touches no device. The public
launchers below import their kernel modules on first call.

    w8a16_gemv(x2d, qw, bias=None, out_dtype=None, config=None)   decode, bf16/fp16 activations
    w8a8_gemv(x2d, qw, bias=None, out_dtype=None, config=None)    decode, dynamic fp8 activations
    quantize_activation(x2d, granularity, config=None)            == dispatch.quantize_activation on GPU
"""

from __future__ import annotations

from typing import Any


def w8a16_gemv(*args: Any, **kwargs: Any):
    from ._gemv import w8a16_gemv as f
    return f(*args, **kwargs)


def w8a8_gemv(*args: Any, **kwargs: Any):
    from ._gemv import w8a8_gemv as f
    return f(*args, **kwargs)


def quantize_activation(*args: Any, **kwargs: Any):
    from ._act_quant import quantize_activation as f
    return f(*args, **kwargs)


__all__ = ["quantize_activation", "w8a16_gemv", "w8a8_gemv"]

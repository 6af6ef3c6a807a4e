"""The one definition of each format's linear semantics. Tests, autotune verification and users compare to this.

    W8A16: y = x.float() @ dequantize(qw).T (+ bias)
    W8A8:  xq, xs = quantize_activation(x, g);  y = (xq.float() * xs) @ dequantize(qw).T (+ bias)
           g = per_token_group_128 (fp8_block), per_tensor (fp8_tensor), per_token (fp8_row)
    y is cast to out_dtype (default x.dtype). x may have any leading dimensions, including M = 0.

The matmul accumulates in float64 on GPUs, so TF32 or reduced-precision settings cannot change the reference;
on the CPU it runs in float32 (no reduced-precision fp32 matmul there by default).
"""

from __future__ import annotations

import torch

from .activation import dequantize_activation, quantize_activation
from .errors import FormatError
from .formats import QWeight
from .weight_quant import dequantize


def check_linear_args(x: torch.Tensor, qw: QWeight, bias: torch.Tensor | None) -> None:
    if not isinstance(qw, QWeight):
        raise FormatError(f"expected a QWeight (see dispatch.quantize), got {type(qw).__name__}")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 1:
        raise FormatError("x must be a floating-point tensor [..., K]")
    n, k = qw.shape
    if x.shape[-1] != k:
        raise FormatError(f"x has {x.shape[-1]} features in its last dimension but the weight expects K = {k} "
                          f"(weight shape [N, K] = [{n}, {k}])")
    if x.device != qw.device:
        raise FormatError(f"x is on {x.device} but the weight is on {qw.device}; move one (QWeight.to(device))")
    if bias is not None and (bias.shape != (n,) or bias.device != x.device):
        raise FormatError(f"bias must be a [{n}] tensor on {x.device}, got {tuple(bias.shape)} on {bias.device}")


def activation_values(x: torch.Tensor, qw: QWeight) -> torch.Tensor:
    """fp32 activations as the format sees them: x itself (W8A16) or its quantize-dequantize (W8A8)."""
    g = qw.act_granularity
    if g is None:
        return x.float()
    xq, xs = quantize_activation(x, g)
    return dequantize_activation(xq, xs, g)


def linear(x: torch.Tensor, qw: QWeight, bias: torch.Tensor | None = None,
           out_dtype: torch.dtype | None = None) -> torch.Tensor:
    check_linear_args(x, qw, bias)
    acc = torch.float64 if x.device.type == "cuda" else torch.float32
    xv = activation_values(x, qw).to(acc)
    y = xv @ dequantize(qw).to(acc).T
    if bias is not None:
        y = y + bias.to(acc)
    return y.to(out_dtype or x.dtype)

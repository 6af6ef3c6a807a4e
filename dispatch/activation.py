"""Dynamic activation quantization: the reference every kernel's fused activation quant must match bit for bit.

    s     = fp32(max(amax, AMAX_FLOOR) / 448)       over the tensor, each token, or each 1x128 group
    codes = e4m3_rne(clamp(fp32(v / s), -448, 448))  (IEEE division, not a multiply by 1/s)

NaN or Inf in x propagate: a NaN makes its group's scale NaN; an Inf makes it Inf (the Inf element becomes NaN,
the rest of its group 0). This is deliberate: a server should see non-finite activations, not have them hidden.
"""

from __future__ import annotations

import math

import torch

from .errors import FormatError
from .formats import ACT_GROUP, AMAX_FLOOR, E4M3_MAX, ActGranularity


def e4m3_codes(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> e4m3fn, round-to-nearest-even, saturating at +-448 (explicit clamp; NaN stays NaN)."""
    return v.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def ieee_div(a: torch.Tensor, b: float) -> torch.Tensor:
    """a / b as an IEEE division on every device. On CUDA, torch turns a division by a Python scalar into a
    multiplication by its reciprocal (one bit off near ties); dividing by a tensor keeps the true division
    that kernels (div.rn.f32, __fdiv_rn) and the CPU compute."""
    return a / torch.full_like(a, b)


def scale_from_amax(amax: torch.Tensor) -> torch.Tensor:
    """fp32 scale = max(amax, AMAX_FLOOR) / 448 (IEEE division), NaN propagating."""
    amax = amax.float()
    return ieee_div(torch.where(amax < AMAX_FLOOR, torch.full_like(amax, AMAX_FLOOR), amax), E4M3_MAX)


def _check_x(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 1:
        raise FormatError("activations must be a floating-point tensor with at least one dimension [..., K]")
    if x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz):
        raise FormatError(f"activations are already {x.dtype}; pass bf16/fp16/fp32 activations")


def quantize_activation(x: torch.Tensor, granularity: "ActGranularity | str") -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize x [..., K] to e4m3 codes (same shape) and fp32 scales.

    Scale shapes: per_tensor -> [] ; per_token -> [..., 1] ; per_token_group_128 -> [..., ceil(K/128)]
    (the last group may be partial: its amax is over the values that exist).
    """
    _check_x(x)
    g = ActGranularity.parse(granularity)
    xf = x.float()
    k = x.shape[-1]
    if g is ActGranularity.PER_TENSOR:
        amax = xf.abs().amax() if xf.numel() else torch.zeros((), device=x.device)
        s = scale_from_amax(amax)
        return e4m3_codes(xf / s), s
    if g is ActGranularity.PER_TOKEN:
        if k == 0:
            raise FormatError("per-token activation quantization needs K >= 1")
        s = scale_from_amax(xf.abs().amax(dim=-1, keepdim=True))
        return e4m3_codes(xf / s), s
    # per_token_group_128
    if k == 0:
        raise FormatError("group activation quantization needs K >= 1")
    groups = math.ceil(k / ACT_GROUP)
    pad = groups * ACT_GROUP - k
    xp = torch.nn.functional.pad(xf, (0, pad)) if pad else xf
    xg = xp.reshape(*x.shape[:-1], groups, ACT_GROUP)
    s = scale_from_amax(xg.abs().amax(dim=-1))
    codes = e4m3_codes(xg / s.unsqueeze(-1)).reshape(*x.shape[:-1], groups * ACT_GROUP)
    return codes[..., :k], s


def dequantize_activation(codes: torch.Tensor, scales: torch.Tensor,
                          granularity: "ActGranularity | str") -> torch.Tensor:
    """fp32 values codes * scale, expanding the scale layout of `granularity`."""
    g = ActGranularity.parse(granularity)
    c = codes.float()
    if g is ActGranularity.PER_TOKEN_GROUP_128:
        k = codes.shape[-1]
        return c * scales.repeat_interleave(ACT_GROUP, dim=-1)[..., :k]
    return c * scales

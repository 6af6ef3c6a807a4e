"""Adapters for already-quantized checkpoints: their tensors in, a validated QWeight out.

Supported layouts (the tensor names are those the checkpoints use):
  block FP8     weight e4m3 [N, K] + weight_scale_inv fp32 [ceil(N/128), ceil(K/128)]
                (DeepSeek-V3 / Qwen FP8 releases: despite the name, w = q * weight_scale_inv)
  per-tensor    weight e4m3 + weight_scale of shape [] or [1]       (compressed-tensors "FP8")
  per-channel   weight e4m3 + weight_scale of shape [N, 1] or [N]   (compressed-tensors "FP8_DYNAMIC")
  MX            weight e4m3 (or its uint8 codes) + weight_scale uint8/e8m0 codes [N, ceil(K/32)]
The format is inferred from the scale's dtype and shape; pass `fmt=` to insist on one.
"""

from __future__ import annotations

import torch

from .errors import FormatError
from .formats import Format, QWeight, resolve_act, scale_shape


def _weight_codes(weight: torch.Tensor) -> torch.Tensor:
    if weight.dtype == torch.uint8:
        return weight.view(torch.float8_e4m3fn)
    if weight.dtype == torch.float8_e4m3fn:
        return weight
    if weight.dtype == torch.float8_e4m3fnuz:
        raise FormatError("weight is float8_e4m3fnuz (MI300 variant, max 240, different NaN/zero codes); "
                          "re-quantize from the original weights or convert: fnuz values equal fn codes / 2 "
                          "(dequantize, then dispatch.quantize)")
    raise FormatError(f"checkpoint weight must be float8_e4m3fn (or its uint8 codes), got {weight.dtype}")


def from_checkpoint(weight: torch.Tensor, weight_scale: torch.Tensor | None = None, *,
                    weight_scale_inv: torch.Tensor | None = None, fmt: "Format | str | None" = None,
                    act: "str | None" = None) -> QWeight:
    """Build a QWeight from checkpoint tensors without re-quantizing (bits are kept as they are)."""
    if (weight_scale is None) == (weight_scale_inv is None):
        raise FormatError("pass exactly one of weight_scale (per-tensor, per-channel, MX) or weight_scale_inv "
                          "(block FP8, DeepSeek-V3 style)")
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise FormatError("checkpoint weight must be a 2-D [N, K] tensor")
    q = _weight_codes(weight).contiguous()
    n, k = q.shape
    s = weight_scale if weight_scale is not None else weight_scale_inv
    want = Format.parse(fmt) if fmt is not None else None

    if weight_scale_inv is not None:
        inferred = Format.FP8_BLOCK
    elif s.dtype in (torch.uint8, torch.float8_e8m0fnu):
        inferred = Format.MXFP8
    elif s.numel() == 1 and s.dim() <= 1 and not (want is Format.FP8_ROW and n == 1):
        inferred = Format.FP8_TENSOR
    elif tuple(s.shape) in ((n, 1), (n,)):
        inferred = Format.FP8_ROW
    elif s.dim() == 2 and tuple(s.shape) == scale_shape(Format.FP8_BLOCK, n, k):
        inferred = Format.FP8_BLOCK
    else:
        raise FormatError(f"cannot infer the format of a [{n}, {k}] weight from a {s.dtype} scale of shape "
                          f"{list(s.shape)}: expected [] or [1] (per-tensor), [N, 1] or [N] (per-channel), "
                          f"[ceil(N/128), ceil(K/128)] as weight_scale_inv (block), or uint8 [N, ceil(K/32)] (MX)")
    if want is not None and want is not inferred:
        raise FormatError(f"fmt={want} was requested but the scale tensors describe {inferred}")
    fmt_ = inferred

    if fmt_ is Format.MXFP8:
        s = s.view(torch.uint8) if s.dtype == torch.float8_e8m0fnu else s
        if bool((s == 255).any()):
            raise FormatError("MX scale holds the e8m0 NaN code 255; the checkpoint is corrupt")
        s = s.contiguous().view(torch.float8_e8m0fnu)
    else:
        if not s.is_floating_point():
            raise FormatError(f"{fmt_} scales must be floating point, got {s.dtype}")
        s = s.float()
        if fmt_ is Format.FP8_TENSOR:
            s = s.reshape(())
        elif fmt_ is Format.FP8_ROW:
            s = s.reshape(n)
        s = s.contiguous()
        if not bool(torch.isfinite(s).all()) or bool((s <= 0).any()):
            raise FormatError(f"{fmt_} scales must be finite and positive; the checkpoint holds others")
    nan_codes = (q.view(torch.uint8) & 0x7F) == 0x7F  # e4m3fn's only NaN codes: 0x7F and 0xFF
    if bool(nan_codes.any()):
        idx = nan_codes.nonzero()[0].tolist()
        raise FormatError(f"checkpoint weight holds an e4m3 NaN code at {idx}")
    return QWeight(fmt_, resolve_act(fmt_, act), q, s)

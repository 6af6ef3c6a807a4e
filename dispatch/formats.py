"""The four FP8 weight formats, their activation modes, and `QWeight`, whose scale layout is its type.

A wrong scale layout is not a shape error in a matmul: it silently produces wrong numbers. So every
`QWeight` validates dtype, shape and device of its scale against the one layout its format allows, at
construction, and consumers call `QWeight.require(...)` before they read the scale.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Mapping

import torch

from .errors import FormatError, UnsupportedError

# --- Format constants: the one table of numbers the kernels and references share. -----------------
E4M3_MAX = 448.0  # OCP e4m3fn (sm_89+, gfx12). MI300's e4m3fnuz has max 240: not this format.
WEIGHT_BLOCK = 128  # fp8_block: 128x128 weight blocks
ACT_GROUP = 128  # fp8_block: 1x128 activation groups along K
MX_GROUP = 32  # mxfp8: one e8m0 scale per 32 values along K
E8M0_BIAS = 127
E8M0_MIN_EXP = -127  # code 0
E8M0_MAX_EXP = 127  # code 254 (255 is NaN)
MX_FLOOR_EMAX = 8  # OCP MX v1.0: shared_exp = floor(log2(amax)) - emax(e4m3) with emax(e4m3) = 8
# An all-zero group would give scale 0 and 0/0 codes. Its amax is floored to this value, so the scale
# is AMAX_FLOOR / 448 (positive, finite) and every code is +0. Kernels use the same constant.
AMAX_FLOOR = 1e-12


class Format(str, enum.Enum):
    """Weight format. The string values are accepted wherever a format is."""

    FP8_BLOCK = "fp8_block"  # e4m3 + fp32 scale per 128x128 block (DeepSeek-V3 style)
    FP8_TENSOR = "fp8_tensor"  # e4m3 + one fp32 scale
    FP8_ROW = "fp8_row"  # e4m3 + one fp32 scale per output row (per-channel)
    MXFP8 = "mxfp8"  # e4m3 + one e8m0 scale per 32 values along K (OCP MX)

    @classmethod
    def parse(cls, value: "Format | str") -> "Format":
        if isinstance(value, Format):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            names = ", ".join(repr(f.value) for f in cls)
            raise FormatError(f"unknown format {value!r}; use one of {names}") from None

    def __str__(self) -> str:  # "fp8_block", not "Format.FP8_BLOCK", in messages and tables
        return self.value


class Act(str, enum.Enum):
    """How activations enter the matmul: quantized to fp8 (W8A8) or kept in bf16/fp16 (W8A16)."""

    FP8 = "fp8"
    BF16 = "bf16"

    @classmethod
    def parse(cls, value: "Act | str") -> "Act":
        if isinstance(value, Act):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise FormatError(f"unknown act {value!r}; use 'fp8' (W8A8) or 'bf16' (W8A16)") from None

    def __str__(self) -> str:
        return self.value


class ActGranularity(str, enum.Enum):
    """Granularity of dynamic activation scales (one fp32 scale per tensor, token, or 1x128 group)."""

    PER_TENSOR = "per_tensor"
    PER_TOKEN = "per_token"
    PER_TOKEN_GROUP_128 = "per_token_group_128"

    @classmethod
    def parse(cls, value: "ActGranularity | str") -> "ActGranularity":
        if isinstance(value, ActGranularity):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            names = ", ".join(repr(g.value) for g in cls)
            raise FormatError(f"unknown activation granularity {value!r}; use one of {names}") from None

    def __str__(self) -> str:
        return self.value


class MXScaleMode(str, enum.Enum):
    """How the e8m0 exponent of an MX group is chosen.

    RCEIL (cuBLAS, TransformerEngine): e = ceil(log2(amax / 448)); no value clips.
    FLOOR (OCP MX v1.0, section 6.3): e = floor(log2(amax)) - 8; values above 448 * 2^e saturate.
    """

    RCEIL = "rceil"
    FLOOR = "floor"

    @classmethod
    def parse(cls, value: "MXScaleMode | str") -> "MXScaleMode":
        if isinstance(value, MXScaleMode):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise FormatError(f"unknown mx_scale_mode {value!r}; use 'rceil' or 'floor'") from None


DEFAULT_ACT = {
    Format.FP8_BLOCK: Act.FP8,
    Format.FP8_TENSOR: Act.FP8,
    Format.FP8_ROW: Act.BF16,
    Format.MXFP8: Act.BF16,
}

# W8A8: which dynamic activation scale pairs with each weight scale layout.
ACT_GRANULARITY = {
    Format.FP8_BLOCK: ActGranularity.PER_TOKEN_GROUP_128,
    Format.FP8_TENSOR: ActGranularity.PER_TENSOR,
    Format.FP8_ROW: ActGranularity.PER_TOKEN,
}


def act_granularity(fmt: Format, act: Act) -> ActGranularity | None:
    """The activation quantization a (format, act) pair implies; None for W8A16."""
    if act is Act.BF16:
        return None
    if fmt not in ACT_GRANULARITY:
        raise UnsupportedError(
            f"format {fmt} has no W8A8 (act='fp8') mode: its e8m0 group scales along K have no "
            "matching activation scheme here; use act='bf16' (W8A16), or format 'fp8_block' for W8A8"
        )
    return ACT_GRANULARITY[fmt]


def resolve_act(fmt: Format, act: "Act | str | None") -> Act:
    act = DEFAULT_ACT[fmt] if act is None else Act.parse(act)
    act_granularity(fmt, act)  # raises for mxfp8 + fp8
    return act


def scale_shape(fmt: Format, n: int, k: int) -> tuple[int, ...]:
    """The one scale shape each format allows for an [N, K] weight."""
    if fmt is Format.FP8_BLOCK:
        return (math.ceil(n / WEIGHT_BLOCK), math.ceil(k / WEIGHT_BLOCK))
    if fmt is Format.FP8_TENSOR:
        return ()
    if fmt is Format.FP8_ROW:
        return (n,)
    if fmt is Format.MXFP8:
        return (n, math.ceil(k / MX_GROUP))
    raise AssertionError(fmt)


def scale_dtype(fmt: Format) -> torch.dtype:
    return torch.float8_e8m0fnu if fmt is Format.MXFP8 else torch.float32


@dataclasses.dataclass(frozen=True, eq=False)
class QWeight:
    """An FP8-quantized [N, K] weight (out_features, in_features) whose scale layout is fixed by `format`.

    fp8_block:  scale float32 [ceil(N/128), ceil(K/128)]   (w = q * scale[n // 128, k // 128])
    fp8_tensor: scale float32 []                           (w = q * scale)
    fp8_row:    scale float32 [N]                          (w = q * scale[n])
    mxfp8:      scale float8_e8m0fnu [N, ceil(K/32)]       (w = q * 2^(code - 127) of [n, k // 32])
    """

    format: Format
    act: Act
    qdata: torch.Tensor
    scale: torch.Tensor
    # Per-weight cache of derived layouts and dispatch plans, keyed by the consumer. Not part of the
    # value: excluded from equality and repr, dropped by `.to()` and `to_dict()`.
    _cache: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "format", Format.parse(self.format))
        object.__setattr__(self, "act", resolve_act(self.format, self.act))
        q, s = self.qdata, self.scale
        if not isinstance(q, torch.Tensor) or not isinstance(s, torch.Tensor):
            raise FormatError("QWeight.qdata and QWeight.scale must be torch tensors")
        if q.dtype != torch.float8_e4m3fn:
            raise FormatError(
                f"QWeight.qdata must be torch.float8_e4m3fn, got {q.dtype}; uint8 codes can be viewed "
                "with .view(torch.float8_e4m3fn), other float8 variants need dispatch.from_checkpoint"
            )
        if q.dim() != 2 or q.shape[0] == 0 or q.shape[1] == 0:
            raise FormatError(f"QWeight.qdata must be a non-empty 2-D [N, K] tensor, got shape {tuple(q.shape)}")
        n, k = q.shape
        want_shape, want_dtype = scale_shape(self.format, n, k), scale_dtype(self.format)
        if s.dtype != want_dtype or tuple(s.shape) != want_shape:
            raise FormatError(
                f"{self.format} weight of shape [{n}, {k}] needs a {want_dtype} scale of shape "
                f"{list(want_shape)}, got {s.dtype} {list(s.shape)}; build it with dispatch.quantize or "
                "dispatch.from_checkpoint, which convert checkpoint layouts"
            )
        if s.device != q.device:
            raise FormatError(f"QWeight.qdata is on {q.device} but its scale is on {s.device}; move both")
        if not q.is_contiguous() or not s.is_contiguous():
            raise FormatError("QWeight.qdata and scale must be contiguous; call .contiguous() before building")

    # --- Shape and layout ------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.qdata.shape[0]), int(self.qdata.shape[1]))

    @property
    def out_features(self) -> int:
        return self.shape[0]

    @property
    def in_features(self) -> int:
        return self.shape[1]

    @property
    def device(self) -> torch.device:
        return self.qdata.device

    @property
    def act_granularity(self) -> ActGranularity | None:
        return act_granularity(self.format, self.act)

    def require(self, fmt: Format, act: Act | None = None) -> "QWeight":
        """Called by every consumer of a scale layout: a mismatched tag is an error, never a wrong result."""
        if self.format is not fmt or (act is not None and self.act is not act):
            want = f"{fmt}" + (f"/{act}" if act is not None else "")
            raise FormatError(f"this consumer reads {want} scales, but the weight is {self.format}/{self.act}")
        return self

    @property
    def nbytes(self) -> int:
        return self.qdata.numel() * self.qdata.element_size() + self.scale.numel() * self.scale.element_size()

    # --- Moves and serialization ---------------------------------------------------------------
    def to(self, device: "torch.device | str") -> "QWeight":
        device = torch.device(device)
        if device == self.device:
            return self
        return QWeight(self.format, self.act, self.qdata.to(device), self.scale.to(device))

    def to_dict(self) -> dict[str, torch.Tensor]:
        """Plain tensors for safetensors. e8m0 scales are stored as their uint8 codes (portable)."""
        scale = self.scale.view(torch.uint8) if self.format is Format.MXFP8 else self.scale
        return {"qdata": self.qdata, "scale": scale}

    def metadata(self) -> dict[str, str]:
        """String metadata that goes beside `to_dict()` (safetensors' `metadata=`)."""
        return {"fp8dispatch.format": self.format.value, "fp8dispatch.act": self.act.value}

    @classmethod
    def from_dict(cls, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> "QWeight":
        try:
            fmt = Format.parse(metadata["fp8dispatch.format"])
            act = Act.parse(metadata["fp8dispatch.act"])
            qdata, scale = tensors["qdata"], tensors["scale"]
        except KeyError as e:
            raise FormatError(f"QWeight.from_dict: missing key {e}; expected what to_dict()/metadata() wrote") from None
        if fmt is Format.MXFP8 and scale.dtype == torch.uint8:
            scale = scale.view(torch.float8_e8m0fnu)
        return cls(fmt, act, qdata.contiguous(), scale.contiguous())

    def __repr__(self) -> str:
        n, k = self.shape
        return f"QWeight({self.format.value}, act={self.act.value}, shape=[{n}, {k}], device={self.device})"


def describe_layout(qw: QWeight) -> str:
    """Human-readable scale layout, for the demo and explain()."""
    s = qw.scale
    what = {
        Format.FP8_BLOCK: "one fp32 scale per 128x128 block",
        Format.FP8_TENSOR: "one fp32 scale for the whole tensor",
        Format.FP8_ROW: "one fp32 scale per output row",
        Format.MXFP8: "one e8m0 scale per 32 values along K",
    }[qw.format]
    return f"{what}: {str(s.dtype).replace('torch.', '')} {list(s.shape)}"

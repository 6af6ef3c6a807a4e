"""Load-time weight quantizers (bf16/fp16/fp32 [N, K] -> QWeight) and the exact dequantizer.

Memory: a weight is processed in row chunks of at most CHUNK_ELEMS values, so the transient memory beyond the
input and the output stays near 4 fp32 temporaries of one chunk (~32 MB) whatever the weight's size.
Per-tensor scaling needs the global amax first: one read pass for the amax, one for the codes.
On CUDA/ROCm tensors the fused Triton kernels of `kernels_triton.weight_quant` produce the same bits in one launch
that reads the weight once (per-tensor: an amax launch and a cast launch, two reads), allocate their outputs and
an 8-byte counter (the H200 measured <= 4 KB of transient memory, and a constant 524800 B for mxfp8 that is not
traced yet), and detect NaN/Inf as a by-product of the group amax; the one host synchronization
reads that counter. Only when it is nonzero does the torch path run, to say where the bad value is.
FP8DISPATCH_QUANTIZER=torch forces the torch-ops path.

Conventions (interoperate with checkpoints through these bits):
  fp8_block / fp8_tensor / fp8_row: s = fp32(max(amax, AMAX_FLOOR) / 448); q = e4m3_rne(clamp(w / s, +-448))
  mxfp8 rceil (cuBLAS, TransformerEngine): e = ceil(log2(fp32(amax / 448))), no value clips
  mxfp8 floor (OCP MX v1.0 6.3): e = floor(log2(amax)) - 8; values above 448 * 2^e saturate
  both: e clamped to [-127, 127]; an all-zero group gets e = -127 and zero codes.
"""

from __future__ import annotations

import functools
import math
import os

import torch

from .activation import e4m3_codes, ieee_div, scale_from_amax
from .errors import FormatError
from .formats import (E4M3_MAX, E8M0_BIAS, E8M0_MAX_EXP, E8M0_MIN_EXP, MX_FLOOR_EMAX, MX_GROUP, WEIGHT_BLOCK,
                      Format, MXScaleMode, QWeight, resolve_act, scale_shape)
from .target import detect

CHUNK_ELEMS = 2 * 1024 * 1024  # fp32 values per chunk: 8 MB per temporary


def _chunk_rows(n: int, k: int, align: int) -> int:
    rows = max(1, CHUNK_ELEMS // max(k, 1))
    rows = max(align, rows // align * align)
    return min(rows, n) if n >= align else n


def _check_weight(w: torch.Tensor) -> None:
    if not isinstance(w, torch.Tensor):
        raise FormatError(f"weight must be a torch.Tensor, got {type(w).__name__}")
    if w.dim() != 2 or w.shape[0] == 0 or w.shape[1] == 0:
        raise FormatError(f"weight must be a non-empty 2-D [N, K] (out_features, in_features) tensor, "
                          f"got shape {tuple(w.shape)}")
    if not w.is_floating_point() or w.dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
                                               torch.float8_e5m2fnuz, torch.float8_e8m0fnu):
        raise FormatError(f"weight must be bf16/fp16/fp32 to quantize, got {w.dtype}; for already-quantized "
                          "tensors use dispatch.from_checkpoint")


def _check_finite_chunk(chunk: torch.Tensor, row0: int) -> None:
    # Load time, not the hot path: a host sync per chunk is fine here.
    bad = ~torch.isfinite(chunk)
    if bool(bad.any()):
        r, c = (int(i) for i in bad.nonzero()[0])
        v = float(chunk[r, c])
        raise FormatError(f"weight has a non-finite value {v} at [{row0 + r}, {c}]; a NaN/Inf weight cannot be "
                          "scaled (fix the checkpoint or mask the value before quantizing)")


def _pow2(e: torch.Tensor) -> torch.Tensor:
    """Exact fp32 2^e for integer e in [-127, 127], built from bits (2^-127 is an fp32 subnormal)."""
    e = e.to(torch.int32)
    normal = ((e + 127).clamp(min=1) << 23)
    bits = torch.where(e >= -126, normal, torch.full_like(e, 1 << 22))
    return bits.view(torch.float32)


def mx_exponent(amax: torch.Tensor, mode: MXScaleMode) -> torch.Tensor:
    """int32 shared exponent per MX group from fp32 amax (all-zero group -> -127)."""
    amax = amax.float()
    if mode is MXScaleMode.RCEIL:
        r = ieee_div(amax, E4M3_MAX)
        m, ex = torch.frexp(r)  # r = m * 2^ex, m in [0.5, 1)
        e = torch.where(m == 0.5, ex - 1, ex)  # ceil(log2 r), exact
    else:
        m, ex = torch.frexp(amax)
        e = ex - 1 - MX_FLOOR_EMAX  # floor(log2 amax) - 8
    e = torch.where(amax > 0, e, torch.full_like(e, E8M0_MIN_EXP))
    return e.clamp(E8M0_MIN_EXP, E8M0_MAX_EXP).to(torch.int32)


def _pad_k(x: torch.Tensor, multiple: int) -> torch.Tensor:
    pad = (-x.shape[1]) % multiple
    return torch.nn.functional.pad(x, (0, pad)) if pad else x


def quantize(w: torch.Tensor, fmt: "Format | str", *, act: "str | None" = None,
             mx_scale_mode: "MXScaleMode | str" = "rceil") -> QWeight:
    """Quantize a float [N, K] weight to `fmt`. `act` ('fp8' W8A8 / 'bf16' W8A16) overrides the default."""
    fmt = Format.parse(fmt)
    act_ = resolve_act(fmt, act)
    mode = MXScaleMode.parse(mx_scale_mode)
    _check_weight(w)
    if w.device.type == "cuda" and os.environ.get("FP8DISPATCH_QUANTIZER", "kernel") != "torch":
        kernel = _gpu_quantizer()
        if kernel is not None:
            with torch.cuda.device(w.device):  # Triton launches on the current device: make it w's
                qdata, scale, bad = kernel(w, fmt, mode, hw_fp8=detect(w.device).has_triton_fp8_dtype)
            if int(bad) == 0:  # load time: this one host sync is fine
                return QWeight(fmt, act_, qdata, scale)
            del qdata, scale  # a NaN/Inf weight: the torch path below raises and says where
    return _quantize_torch(w, fmt, act_, mode)


@functools.lru_cache(maxsize=None)
def _gpu_quantizer():
    """The fused Triton quantizer (kernels_triton.weight_quant), or None where Triton cannot be imported."""
    try:
        from kernels_triton.weight_quant import quantize_weight
    except Exception:  # no Triton on this platform: the torch-ops path is complete on its own
        return None
    return quantize_weight


def _quantize_torch(w: torch.Tensor, fmt: Format, act_, mode: MXScaleMode) -> QWeight:
    """Reference quantizer in torch ops, in row chunks (bounded transient memory), on any device."""
    n, k = w.shape
    dev = w.device
    qdata = torch.empty((n, k), dtype=torch.float8_e4m3fn, device=dev)
    align = WEIGHT_BLOCK if fmt is Format.FP8_BLOCK else 1
    rows = _chunk_rows(n, k, align)

    if fmt is Format.FP8_TENSOR:
        amax = torch.zeros((), dtype=torch.float32, device=dev)
        for r0 in range(0, n, rows):
            c = w[r0:r0 + rows].float()
            _check_finite_chunk(c, r0)
            amax = torch.maximum(amax, c.abs().amax())
        scale = scale_from_amax(amax)
        for r0 in range(0, n, rows):
            qdata[r0:r0 + rows] = e4m3_codes(w[r0:r0 + rows].float() / scale)
        return QWeight(fmt, act_, qdata, scale.contiguous())

    scale = torch.empty(scale_shape(fmt, n, k), dtype=torch.float32 if fmt is not Format.MXFP8 else torch.uint8,
                        device=dev)
    for r0 in range(0, n, rows):
        c = w[r0:r0 + rows].float()
        _check_finite_chunk(c, r0)
        nr = c.shape[0]
        if fmt is Format.FP8_ROW:
            s = scale_from_amax(c.abs().amax(dim=1))
            qdata[r0:r0 + nr] = e4m3_codes(c / s[:, None])
            scale[r0:r0 + nr] = s
        elif fmt is Format.FP8_BLOCK:
            nb = math.ceil(nr / WEIGHT_BLOCK)
            cp = _pad_k(c, WEIGHT_BLOCK)
            if nb * WEIGHT_BLOCK != nr:
                cp = torch.nn.functional.pad(cp, (0, 0, 0, nb * WEIGHT_BLOCK - nr))
            kb = cp.shape[1] // WEIGHT_BLOCK
            blocks = cp.reshape(nb, WEIGHT_BLOCK, kb, WEIGHT_BLOCK)
            s = scale_from_amax(blocks.abs().amax(dim=(1, 3)))  # [nb, kb]
            q = e4m3_codes(blocks / s[:, None, :, None]).reshape(nb * WEIGHT_BLOCK, kb * WEIGHT_BLOCK)
            qdata[r0:r0 + nr] = q[:nr, :k]
            scale[r0 // WEIGHT_BLOCK:r0 // WEIGHT_BLOCK + nb] = s
        else:  # MXFP8
            cp = _pad_k(c, MX_GROUP)
            g = cp.shape[1] // MX_GROUP
            groups = cp.reshape(nr, g, MX_GROUP)
            e = mx_exponent(groups.abs().amax(dim=2), mode)  # [nr, g]
            q = e4m3_codes(groups / _pow2(e)[:, :, None]).reshape(nr, g * MX_GROUP)
            qdata[r0:r0 + nr] = q[:, :k]
            scale[r0:r0 + nr] = (e + E8M0_BIAS).to(torch.uint8)
    if fmt is Format.MXFP8:
        scale = scale.view(torch.float8_e8m0fnu)
    return QWeight(fmt, act_, qdata, scale)


def expand_scale(qw: QWeight) -> torch.Tensor:
    """The weight scale broadcast to fp32 [N, K] (or a 0-dim/[N, 1] tensor that broadcasts against it)."""
    n, k = qw.shape
    s = qw.scale
    if qw.format is Format.FP8_TENSOR:
        return s
    if qw.format is Format.FP8_ROW:
        return s[:, None]
    if qw.format is Format.FP8_BLOCK:
        return s.repeat_interleave(WEIGHT_BLOCK, 0)[:n].repeat_interleave(WEIGHT_BLOCK, 1)[:, :k]
    e = s.view(torch.uint8).to(torch.int32) - E8M0_BIAS
    return _pow2(e).repeat_interleave(MX_GROUP, 1)[:, :k]


def dequantize(qw: QWeight) -> torch.Tensor:
    """float32 [N, K] values code * scale of a quantized weight (exact for mxfp8; one fp32 rounding otherwise).

    This product, computed in fp32, is the definition every kernel is checked against."""
    if not isinstance(qw, QWeight):
        raise FormatError(f"dequantize takes a QWeight, got {type(qw).__name__}")
    return qw.qdata.float() * expand_scale(qw)

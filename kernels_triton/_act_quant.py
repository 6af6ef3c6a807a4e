"""Fused dynamic activation quantization: per-tensor, per-token and per-token-group-128 (kernels + launcher).

On the GPU the codes and scales are bit-identical to `dispatch.quantize_activation`:
  s = max(amax, AMAX_FLOOR) / 448 (IEEE division), codes = e4m3_rne(clamp(v / s, -448, 448)) with v / s an
  IEEE division (`tl.math.div_rn` -> div.rn.f32; Triton's plain `/` is an approximate division on CUDA),
  amax a NaN-propagating max. Lengths are runtime arguments; nothing reads a tensor value on the host.

Per-tensor: up to `ActQuantConfig.single_program_max` elements, ONE program computes the amax and casts
(one launch, the decode case); larger tensors use a block-parallel partial amax (atomic max on the int32
bits of the non-negative fp32 amax: the order of non-negative floats is the order of their bits, and a
NaN's bits exceed +Inf's, so NaN propagates) followed by a cast kernel (two launches plus a zero fill).

`hw_fp8=False` writes uint8 codes with the software encoder (sm_80, and the interpreter-safe path the
CPU tests run: the interpreter's fp32 -> fp8 cast is wrong).
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from dispatch.errors import BackendUnavailable, FormatError, UnsupportedError
from dispatch.formats import ACT_GROUP, ActGranularity
from dispatch.target import detect

from ._fp8 import amax_to_scale, quantize_e4m3
from .configs import ActQuantConfig, exact_hw_e4m3_cast


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _store_codes(q_ptr, offs, mask, v, s, HW_FP8: tl.constexpr, HW_CVT: tl.constexpr):
    tl.store(q_ptr + offs, quantize_e4m3(tl.math.div_rn(v, s), HW_FP8, HW_CVT), mask=mask)


@triton.jit
def _per_token_kernel(x_ptr, q_ptr, s_ptr, K, stride_xm, stride_qm,
                      HW_FP8: tl.constexpr, HW_CVT: tl.constexpr, BLOCK: tl.constexpr):
    """One program per row: amax over the row, then the cast (the row is re-read from L1/L2)."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    xr = x_ptr + row * stride_xm
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for k0 in range(0, K, BLOCK):
        v = tl.load(xr + k0 + offs, mask=k0 + offs < K, other=0.0).to(tl.float32)
        amax = _max_nan(amax, tl.abs(v))
    s = amax_to_scale(tl.reduce(amax, 0, _max_nan))
    tl.store(s_ptr + row, s)
    for k0 in range(0, K, BLOCK):
        v = tl.load(xr + k0 + offs, mask=k0 + offs < K, other=0.0).to(tl.float32)
        _store_codes(q_ptr + row * stride_qm, k0 + offs, k0 + offs < K, v, s, HW_FP8, HW_CVT)


@triton.jit
def _per_group_kernel(x_ptr, q_ptr, s_ptr, K, NG, stride_xm, stride_qm, stride_sm,
                      HW_FP8: tl.constexpr, HW_CVT: tl.constexpr, GROUPS: tl.constexpr):
    """Program (row, chunk): GROUPS 1x128 groups of one row; each group's amax and cast stay in registers."""
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    c = tl.arange(0, 128)
    kk = g[:, None] * 128 + c[None, :]
    mask = (g[:, None] < NG) & (kk < K)
    v = tl.load(x_ptr + row * stride_xm + kk, mask=mask, other=0.0).to(tl.float32)
    s = amax_to_scale(tl.reduce(tl.abs(v), 1, _max_nan))
    tl.store(s_ptr + row * stride_sm + g, s, mask=g < NG)
    _store_codes(q_ptr + row * stride_qm, kk, mask, v, s[:, None], HW_FP8, HW_CVT)


@triton.jit
def _per_tensor_single_kernel(x_ptr, q_ptr, s_ptr, NUMEL, HW_FP8: tl.constexpr, HW_CVT: tl.constexpr, BLOCK: tl.constexpr):
    """Decode sizes: one program, amax then cast (one launch; x stays in L2)."""
    offs = tl.arange(0, BLOCK)
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for i0 in range(0, NUMEL, BLOCK):
        v = tl.load(x_ptr + i0 + offs, mask=i0 + offs < NUMEL, other=0.0).to(tl.float32)
        amax = _max_nan(amax, tl.abs(v))
    s = amax_to_scale(tl.reduce(amax, 0, _max_nan))
    tl.store(s_ptr, s)
    for i0 in range(0, NUMEL, BLOCK):
        v = tl.load(x_ptr + i0 + offs, mask=i0 + offs < NUMEL, other=0.0).to(tl.float32)
        _store_codes(q_ptr, i0 + offs, i0 + offs < NUMEL, v, s, HW_FP8, HW_CVT)


@triton.jit
def _partial_amax_kernel(x_ptr, amax_bits_ptr, NUMEL, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * (BLOCK * ITERS)
    offs = tl.arange(0, BLOCK)
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.static_range(ITERS):
        o = base + i * BLOCK + offs
        amax = _max_nan(amax, tl.abs(tl.load(x_ptr + o, mask=o < NUMEL, other=0.0).to(tl.float32)))
    a = tl.reduce(amax, 0, _max_nan)
    tl.atomic_max(amax_bits_ptr, a.to(tl.int32, bitcast=True))


@triton.jit
def _cast_by_amax_kernel(x_ptr, q_ptr, s_ptr, amax_bits_ptr, NUMEL, HW_FP8: tl.constexpr, HW_CVT: tl.constexpr, BLOCK: tl.constexpr):
    s = amax_to_scale(tl.load(amax_bits_ptr).to(tl.float32, bitcast=True))
    pid = tl.program_id(0)
    if pid == 0:
        tl.store(s_ptr, s)
    o = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + o, mask=o < NUMEL, other=0.0).to(tl.float32)
    _store_codes(q_ptr, o, o < NUMEL, v, s, HW_FP8, HW_CVT)


def resolve_fp8_path(x: torch.Tensor, hw_fp8: bool | None) -> tuple[bool, bool]:
    """(HW_FP8, HW_CVT) for tensors on x's device. CPU tensors need the interpreter and get (False, False)."""
    if x.device.type == "cpu":
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise BackendUnavailable("Triton kernels on CPU tensors need the interpreter: set TRITON_INTERPRET=1 "
                                     "before importing triton (tests only; slow, and not a GPU validation)")
        if hw_fp8:
            raise UnsupportedError("the Triton interpreter rounds fp32 -> fp8 casts wrongly: use hw_fp8=False on CPU")
        return False, False
    tgt = detect(x.device)
    if hw_fp8 is None:
        hw_fp8 = tgt.has_triton_fp8_dtype
    if hw_fp8 and not tgt.has_triton_fp8_dtype:
        raise UnsupportedError(f"{tgt.arch} has no Triton fp8e4nv type: use hw_fp8=False (uint8 codes, software path)")
    return hw_fp8, hw_fp8 and exact_hw_e4m3_cast(tgt)


def quantize_activation(x: torch.Tensor, granularity: "ActGranularity | str", config: ActQuantConfig | None = None,
                        *, hw_fp8: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """GPU twin of `dispatch.quantize_activation`: (codes float8_e4m3fn like x, fp32 scales) with the same
    layouts (per_tensor [], per_token [..., 1], per_token_group_128 [..., ceil(K/128)]). With hw_fp8=False
    the codes are computed in software; they are returned viewed as float8_e4m3fn all the same."""
    g = ActGranularity.parse(granularity)
    if not x.is_floating_point() or x.dim() < 1 or x.shape[-1] == 0:
        raise FormatError("activations must be a floating-point tensor [..., K] with K >= 1")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise FormatError(f"activations must be bf16/fp16/fp32, got {x.dtype}")
    hw, cvt = resolve_fp8_path(x, hw_fp8)
    cfg = config or ActQuantConfig()
    lead, k = tuple(x.shape[:-1]), int(x.shape[-1])
    x2 = x.reshape(-1, k)
    if not x2.is_contiguous():
        x2 = x2.contiguous()
    m = x2.shape[0]
    q = torch.empty((m, k), dtype=torch.float8_e4m3fn if hw else torch.uint8, device=x.device)
    if g is ActGranularity.PER_TOKEN:
        s = torch.empty((m, 1), dtype=torch.float32, device=x.device)
        if m:
            blk = min(cfg.block, max(128, triton.next_power_of_2(k)))
            _per_token_kernel[(m,)](x2, q, s, k, x2.stride(0), q.stride(0), HW_FP8=hw, HW_CVT=cvt, BLOCK=blk,
                                    num_warps=cfg.num_warps)
        s = s.reshape(*lead, 1)
    elif g is ActGranularity.PER_TOKEN_GROUP_128:
        ng = math.ceil(k / ACT_GROUP)
        s = torch.empty((m, ng), dtype=torch.float32, device=x.device)
        groups = max(1, min(cfg.block // 128, triton.next_power_of_2(ng)))
        if m:
            _per_group_kernel[(m, triton.cdiv(ng, groups))](x2, q, s, k, ng, x2.stride(0), q.stride(0), s.stride(0),
                                                            HW_FP8=hw, HW_CVT=cvt, GROUPS=groups, num_warps=cfg.num_warps)
        s = s.reshape(*lead, ng)
    else:
        s = torch.empty((), dtype=torch.float32, device=x.device)
        numel = m * k
        if numel <= cfg.single_program_max:
            blk = min(cfg.block, max(128, triton.next_power_of_2(numel)))
            _per_tensor_single_kernel[(1,)](x2, q, s, numel, HW_FP8=hw, HW_CVT=cvt, BLOCK=blk, num_warps=cfg.num_warps)
        else:
            bits = torch.zeros((), dtype=torch.int32, device=x.device)
            iters = 8
            _partial_amax_kernel[(triton.cdiv(numel, cfg.block * iters),)](x2, bits, numel, BLOCK=cfg.block,
                                                                          ITERS=iters, num_warps=cfg.num_warps)
            _cast_by_amax_kernel[(triton.cdiv(numel, cfg.block),)](x2, q, s, bits, numel, HW_FP8=hw, HW_CVT=cvt,
                                                                   BLOCK=cfg.block, num_warps=cfg.num_warps)
    codes = q if hw else q.view(torch.float8_e4m3fn)
    return codes.reshape(*lead, k), s

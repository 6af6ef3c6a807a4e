"""GPU load-time weight quantization: one fused launch per format (two for per-tensor), bit-identical to the
torch-ops quantizer in `dispatch.weight_quant` (same formulas, IEEE division, RNE, explicit clamp).

Why kernels: the torch-ops quantizer runs ~8 kernels per row chunk over fp32 temporaries; on an H200 a 28672x4096
weight is ~350 MB of traffic (~85 us at copy speed), far less than the launch overhead of that chain. These read
the weight once (per-tensor: twice, the amax first) and write codes and scales directly, with no transient memory.

Called by `dispatch.quantize` for CUDA tensors when Triton can run there; the torch path stays the reference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dispatch.formats import MX_GROUP, WEIGHT_BLOCK, Format, MXScaleMode, scale_shape

from ._fp8 import amax_to_scale, quantize_e4m3

# Scale layouts, named (a constexpr selects the code path inside one kernel body).
TENSOR: tl.constexpr = tl.constexpr(0)
ROW: tl.constexpr = tl.constexpr(1)
BLOCK: tl.constexpr = tl.constexpr(2)
MX: tl.constexpr = tl.constexpr(3)
_LAYOUT = {Format.FP8_TENSOR: 0, Format.FP8_ROW: 1, Format.FP8_BLOCK: 2, Format.MXFP8: 3}


@triton.jit
def _count_nonfinite(w, mask, bad_ptr):
    nonfinite = (w != w) | (tl.abs(w) == float("inf"))
    n_bad = tl.sum(tl.where(mask & nonfinite, 1, 0))
    if n_bad > 0:  # a device-side branch: thousands of programs would otherwise contend on one counter
        tl.atomic_add(bad_ptr, n_bad)


@triton.jit
def _tensor_amax_kernel(w_ptr, amax_ptr, bad_ptr, N, K, stride_w,
                        BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows[:, None] < N) & (cols[None, :] < K)
    w = tl.load(w_ptr + rows[:, None].to(tl.int64) * stride_w + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    _count_nonfinite(w, mask, bad_ptr)
    tl.atomic_max(amax_ptr, tl.max(tl.abs(w)))  # amax >= 0, so float atomic max is exact and order-free


@triton.jit
def _mx_exponent(amax, MX_FLOOR: tl.constexpr):
    """Shared exponent from the fp32 bits (exact ceil/floor of log2, no transcendental functions).
    rceil: r = amax / 448; ceil(log2 r) = exp(r) + (mantissa(r) != 0) for a normal r; a subnormal r gives <= -127.
    floor: floor(log2 amax) - 8 = exp(amax) - 8."""
    if MX_FLOOR:
        bits = amax.to(tl.int32, bitcast=True)
        e = ((bits >> 23) & 0xFF) - 127 - 8
        e = tl.where(((bits >> 23) & 0xFF) == 0, -127, e)
    else:
        r = tl.math.div_rn(amax, tl.full(amax.shape, 448.0, tl.float32))
        bits = r.to(tl.int32, bitcast=True)
        ex = (bits >> 23) & 0xFF
        e = ex - 127 + tl.where((bits & 0x7FFFFF) != 0, 1, 0)
        e = tl.where(ex == 0, -127, e)
    return tl.minimum(tl.maximum(e, -127), 127)


@triton.jit
def _div(a, b):
    """IEEE fp32 division (div.rn.f32). Triton's `/` emits the approximate div.full.f32 on NVIDIA, whose codes
    would differ from the reference's in the last bit near rounding ties."""
    return tl.math.div_rn(a, tl.broadcast_to(b, a.shape))


@triton.jit
def _pow2(e):
    bits = tl.where(e >= -126, (e + 127) << 23, 1 << 22)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _quantize_kernel(w_ptr, q_ptr, s_ptr, amax_ptr, bad_ptr, N, K, stride_w, stride_s,
                     LAYOUT: tl.constexpr, MX_FLOOR: tl.constexpr, HW_FP8: tl.constexpr,
                     BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < N
    w_rows = w_ptr + rows[:, None].to(tl.int64) * stride_w
    q_rows = q_ptr + rows[:, None].to(tl.int64) * K
    if LAYOUT == ROW:
        # Whole rows per program: pass 1 finds each row's amax, pass 2 (served from L2) writes the codes.
        amax = tl.zeros([BLOCK_R], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            m = rmask[:, None] & (cols[None, :] < K)
            w = tl.load(w_rows + cols[None, :], mask=m, other=0.0).to(tl.float32)
            _count_nonfinite(w, m, bad_ptr)
            amax = tl.maximum(amax, tl.max(tl.abs(w), axis=1))
        s = amax_to_scale(amax)
        tl.store(s_ptr + rows, s, mask=rmask)
        for k0 in range(0, K, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            m = rmask[:, None] & (cols[None, :] < K)
            w = tl.load(w_rows + cols[None, :], mask=m, other=0.0).to(tl.float32)
            tl.store(q_rows + cols[None, :], quantize_e4m3(_div(w, s[:, None]), HW_FP8), mask=m)
    else:
        cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
        m = rmask[:, None] & (cols[None, :] < K)
        w = tl.load(w_rows + cols[None, :], mask=m, other=0.0).to(tl.float32)
        if LAYOUT == TENSOR:
            s = amax_to_scale(tl.load(amax_ptr))
            if (pid_r == 0) & (pid_k == 0):
                tl.store(s_ptr, s)
            q = quantize_e4m3(_div(w, s), HW_FP8)
        elif LAYOUT == BLOCK:
            # One program per 128x128 block (BLOCK_R == BLOCK_K == 128).
            _count_nonfinite(w, m, bad_ptr)
            s = amax_to_scale(tl.max(tl.max(tl.abs(w), axis=1), axis=0))
            tl.store(s_ptr + pid_r * stride_s + pid_k, s)
            q = quantize_e4m3(_div(w, s), HW_FP8)
        else:  # MX: groups of 32 along K inside the tile
            _count_nonfinite(w, m, bad_ptr)
            wg = tl.reshape(w, [BLOCK_R, BLOCK_K // 32, 32])
            e = _mx_exponent(tl.max(tl.abs(wg), axis=2), MX_FLOOR)
            q = quantize_e4m3(tl.reshape(_div(wg, _pow2(e)[:, :, None]), [BLOCK_R, BLOCK_K]), HW_FP8)
            gcols = pid_k * (BLOCK_K // 32) + tl.arange(0, BLOCK_K // 32)
            gmask = rmask[:, None] & (gcols[None, :] < stride_s)
            tl.store(s_ptr + rows[:, None].to(tl.int64) * stride_s + gcols[None, :], (e + 127).to(tl.uint8),
                     mask=gmask)
        tl.store(q_rows + cols[None, :], q, mask=m)


def quantize_weight(w: torch.Tensor, fmt: Format, mx_scale_mode: MXScaleMode, *, hw_fp8: bool = True
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(qdata e4m3 [N, K], scale in the format's layout, number of non-finite weights as a device int32).

    `hw_fp8=False` writes uint8 codes through the software encoder (sm_80 and the CPU interpreter)."""
    n, k = w.shape
    if w.stride(1) != 1:
        w = w.contiguous()
    dev = w.device
    qdata = torch.empty((n, k), dtype=torch.float8_e4m3fn, device=dev)
    q_out = qdata if hw_fp8 else qdata.view(torch.uint8)
    bad = torch.zeros((), dtype=torch.int32, device=dev)
    amax = torch.zeros((), dtype=torch.float32, device=dev)
    layout = _LAYOUT[fmt]
    mx_floor = mx_scale_mode is MXScaleMode.FLOOR
    if fmt is Format.MXFP8:
        scale = torch.empty(scale_shape(fmt, n, k), dtype=torch.uint8, device=dev)
        br, bk = 16, 256
        stride_s = scale.shape[1]
    elif fmt is Format.FP8_BLOCK:
        scale = torch.empty(scale_shape(fmt, n, k), dtype=torch.float32, device=dev)
        br = bk = WEIGHT_BLOCK
        stride_s = scale.shape[1]
    else:
        scale = torch.empty(scale_shape(fmt, n, k), dtype=torch.float32, device=dev)
        br, bk, stride_s = (4, 1024, 0) if fmt is Format.FP8_ROW else (32, 256, 0)
    grid_k = 1 if fmt is Format.FP8_ROW else triton.cdiv(k, bk)
    grid = (triton.cdiv(n, br), grid_k)
    if fmt is Format.FP8_TENSOR:
        _tensor_amax_kernel[grid](w, amax, bad, n, k, w.stride(0), BLOCK_R=br, BLOCK_K=bk, num_warps=8)
    _quantize_kernel[grid](w, q_out, scale, amax, bad, n, k, w.stride(0), stride_s, LAYOUT=layout,
                           MX_FLOOR=mx_floor, HW_FP8=hw_fp8, BLOCK_R=br, BLOCK_K=bk, num_warps=8)
    if fmt is Format.MXFP8:
        scale = scale.view(torch.float8_e8m0fnu)
    assert MX_GROUP == 32 and WEIGHT_BLOCK == 128  # the tile shapes above assume these
    return qdata, scale, bad

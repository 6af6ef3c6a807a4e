"""GPU load-time weight quantization, bit-identical to the torch-ops quantizer in `dispatch.weight_quant`.

One kernel per scale layout. Each reads the weight once with the scale group held in registers and writes codes
and scales directly (no transient memory beyond an 8-byte counter):
  fp8_block   one program per 128x128 block
  fp8_row     whole rows per program (K <= 16384; longer rows: an amax loop, then a cast loop)
  mxfp8       [rows, 32 * groups] tiles, the 32-wide groups reduced in registers
  fp8_tensor  an amax pass (atomic max), then a cast pass in reverse order (its first tiles are still in L2);
              two reads of the weight are inherent to a per-tensor scale.

Why this is memory bound on an H200 (4.26 TB/s copy = ~10.7 elements per SM per ns at 3 B/element, against ~250
issued thread-instructions per SM per ns: a budget of ~24 instructions per element at full issue rate; the
previous kernels spent ~22-39 and reached 36-45 % of copy bandwidth; these spend ~8-11, counted on the sm_90 SASS):
  - the division by a group's scale is w * y and two FMAs (Markstein's correction with y = RN(1/s), once per
    group) instead of a div.rn.f32 per element (~10 instructions with a MUFU.RCP and a branch). Proven
    bit-identical to the IEEE division for bf16/fp16 weights; fp32 weights keep div.rn (see `_div_by_scale`);
  - mxfp8 scales are powers of two: w * 2^-e is exactly the correctly rounded w / 2^e, no division at all;
  - sm_90 converts with cvt.rn.satfinite.e4m3x2.f32 (RNE, saturating at 448 like the reference's clamp);
  - the non-finite check is the NaN-propagating group amax the scale needs anyway (no second pass, no
    per-element count): a NaN/Inf group bumps a device counter that `dispatch.quantize` reads once;
  - 128-bit loads and stores (ld/st.global.v4), no spills, >= 32 resident warps per SM.

Called by `dispatch.quantize` for CUDA/ROCm tensors when Triton can run there; the torch path stays the reference
and reports where a non-finite weight is.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl

from dispatch.formats import MX_GROUP, WEIGHT_BLOCK, Format, MXScaleMode, scale_shape
from dispatch.problem import KernelConfig
from dispatch.target import Target, detect

from ._fp8 import amax_to_scale, f32_to_e4m3
from .act_quant_config import exact_hw_e4m3_cast

FLT_MAX: tl.constexpr = tl.constexpr(3.4028234663852886e38)


# --- shared pieces -----------------------------------------------------------------------------------------

@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _to_f32(w):
    """Weights -> fp32. bf16 is the top half of an fp32, so a shift is exact, subnormals included (the same
    instructions Triton emits for the cast on the GPU; the CPU interpreter's bf16 cast mangles subnormals)."""
    if w.dtype == tl.bfloat16:
        f = (w.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        f = w.to(tl.float32)
    return f


@triton.jit
def _nonfinite(amax):
    """amax is a NaN-propagating max of |w| over a group: NaN or +Inf exactly when the group is not finite."""
    return (amax > FLT_MAX) | (amax != amax)


@triton.jit
def _count_bad_groups(amax, bad_ptr):
    """Adds to the counter for each non-finite group: masked atomics, so a finite weight issues no memory traffic,
    no branch and no barrier. Only `== 0` is meaningful (on the GPU a group's value may sit in several lanes)."""
    tl.atomic_add(tl.broadcast_to(bad_ptr, amax.shape), tl.full(amax.shape, 1, tl.int32), mask=_nonfinite(amax))


@triton.jit
def _neg(x):
    """Exact negation, sign of zero included. Triton's unary minus is 0.0 - x (+0 -> +0, and an FADD per element
    in the SASS); x * -1.0 is exact and ptxas folds it into the consuming FFMA as an operand modifier."""
    return x * -1.0


@triton.jit
def _div_by_scale(w, s, y, RECIP: tl.constexpr):
    """The IEEE fp32 quotient w / s (as the reference computes it), `s` broadcast to `w`'s shape.

    RECIP (bf16/fp16 weights, hardware FMA): y = RN(1/s) once per group, then q0 = RN(w*y), r = RN(s*q0 - w)
    and q = RN(q0 - r*y) (Markstein's correction; written as fma(s, q0, -w) and fma(-r, y, q0) so that w = -0
    gives -0 like the division). Proof of bit identity with div.rn: every op here and the division are
    correctly rounded and scale by powers of two, so it suffices to check significands w, s in [1, 2): done
    exhaustively, all 2^7 bf16 and 2^10 fp16 significands x all 2^23 fp32 significands of s
    (tests/test_weight_quant_kernel.py::test_markstein_division_exhaustive). The scaling argument needs no
    underflow where a code can be nonzero (|w/s| >= 2^-11): there s >= AMAX_FLOOR/448 > 2^-49 gives
    |r| >= 2^-106 or r = 0, all normal; below, |q| < 2^-10 and the sign is kept, so the code is +-0 as with
    the division. fp32 weights (24 significant bits, not covered by the check) keep div.rn; so does the
    CPU interpreter, whose fma is an unfused multiply-add."""
    sb = tl.broadcast_to(s, w.shape)
    if RECIP:
        yb = tl.broadcast_to(y, w.shape)
        q0 = w * yb
        r = tl.fma(sb, q0, _neg(w))
        q = tl.fma(_neg(r), yb, q0)
    else:
        q = tl.math.div_rn(w, sb)
    return q


@triton.jit
def _recip(s, RECIP: tl.constexpr):
    """RN(1/s) per group (only used when RECIP)."""
    if RECIP:
        y = tl.math.div_rn(tl.full(s.shape, 1.0, tl.float32), s)
    else:
        y = s
    return y


@triton.jit
def _encode(v, HW_FP8: tl.constexpr, HW_CVT: tl.constexpr):
    """fp32 quotient -> e4m3 codes (fp8e4nv if HW_FP8, else uint8), RNE, saturating at +-448.

    HW_CVT: one cvt.rn.satfinite.e4m3x2.f32 per two values (sm_90): exactly the reference's clamp-then-round
    for every finite quotient (a NaN group is rejected by the caller, so its codes do not matter). Elsewhere
    the exact software encoder (sm_89's Triton lowering goes through f16 and double-rounds)."""
    if HW_CVT:
        q = v.to(tl.float8e4nv, fp_downcast_rounding="rtne")
    elif HW_FP8:
        q = f32_to_e4m3(v).to(tl.float8e4nv, bitcast=True)
    else:
        q = f32_to_e4m3(v)
    return q


@triton.jit
def _pow2(e):
    """Exact fp32 2^e for integer e in [-127, 127] from bits (2^-127 is an fp32 subnormal)."""
    bits = tl.where(e >= -126, (e + 127) << 23, 1 << 22)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _mx_exponent(amax, MX_FLOOR: tl.constexpr):
    """Shared exponent from the fp32 bits (exact ceil/floor of log2, no transcendental functions), clamped to
    e8m0's [-127, 127]; an all-zero group gets -127.
    rceil: r = RN(amax / 448); ceil(log2 r) = exp(r) + (mantissa(r) != 0) for a normal r; a subnormal r is
           m * 2^-149 with m < 2^23, so ceil(log2 r) = -126 when m > 2^22 and <= -127 otherwise.
    floor: floor(log2 amax) - 8 = exp(amax) - 8 (a subnormal amax is far below the clamp)."""
    if MX_FLOOR:
        bits = amax.to(tl.int32, bitcast=True)
        ex = (bits >> 23) & 0xFF
        e = tl.where(ex == 0, -127, ex - 127 - 8)
    else:
        r = tl.math.div_rn(amax, tl.full(amax.shape, 448.0, tl.float32))
        bits = r.to(tl.int32, bitcast=True)
        ex = (bits >> 23) & 0xFF
        mant = bits & 0x7FFFFF
        e = ex - 127 + tl.where(mant != 0, 1, 0)
        e = tl.where(ex == 0, tl.where(mant > 0x400000, -126, -127), e)
    return tl.minimum(tl.maximum(e, -127), 127)


# --- kernels (one per scale layout) --------------------------------------------------------------------------

@triton.jit
def _block128_kernel(w_ptr, q_ptr, s_ptr, bad_ptr, N, K, stride_w, stride_s,
                     HW_FP8: tl.constexpr, HW_CVT: tl.constexpr, RECIP: tl.constexpr, BLOCK: tl.constexpr):
    """One program per BLOCK x BLOCK block (BLOCK = 128). A 1-D grid with the K block varying fastest: concurrent
    programs stream whole rows, and the row count is not bound by the 65535 limit of grid.y.
    stride_s = ceil(K / 128) is also the number of K blocks."""
    pid = tl.program_id(0)
    pid_k = pid % stride_s
    pid_r = pid // stride_s
    rows = pid_r * BLOCK + tl.arange(0, BLOCK)
    cols = pid_k * BLOCK + tl.arange(0, BLOCK)
    m = (rows[:, None] < N) & (cols[None, :] < K)
    r64 = rows[:, None].to(tl.int64)
    w = _to_f32(tl.load(w_ptr + r64 * stride_w + cols[None, :], mask=m, other=0.0))
    amax = tl.reduce(tl.reduce(tl.abs(w), 1, _max_nan), 0, _max_nan)
    if _nonfinite(amax):
        tl.atomic_add(bad_ptr, 1)
    s = amax_to_scale(amax)
    tl.store(s_ptr + pid_r * stride_s + pid_k, s)
    q = _encode(_div_by_scale(w, s, _recip(s, RECIP), RECIP), HW_FP8, HW_CVT)
    tl.store(q_ptr + r64 * K + cols[None, :], q, mask=m)


@triton.jit
def _row_kernel(w_ptr, q_ptr, s_ptr, bad_ptr, N, K, stride_w,
                HW_FP8: tl.constexpr, HW_CVT: tl.constexpr, RECIP: tl.constexpr,
                BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, LOOP: tl.constexpr):
    """BLOCK_R whole rows per program. LOOP=False: BLOCK_K >= K, the rows stay in registers (one read).
    LOOP=True (very long rows): an amax loop, then a cast loop that re-reads the rows (partly from L2)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < N
    r64 = rows[:, None].to(tl.int64)
    cols = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + r64 * stride_w
    q_rows = q_ptr + r64 * K
    if LOOP:
        acc = tl.zeros([BLOCK_R, BLOCK_K], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            m = rmask[:, None] & (k0 + cols[None, :] < K)
            w = _to_f32(tl.load(w_rows + k0 + cols[None, :], mask=m, other=0.0))
            acc = _max_nan(acc, tl.abs(w))
        amax = tl.reduce(acc, 1, _max_nan)
    else:
        m = rmask[:, None] & (cols[None, :] < K)
        w = _to_f32(tl.load(w_rows + cols[None, :], mask=m, other=0.0))
        amax = tl.reduce(tl.abs(w), 1, _max_nan)
    _count_bad_groups(amax, bad_ptr)
    s = amax_to_scale(amax)
    tl.store(s_ptr + rows, s, mask=rmask)
    s2 = s[:, None]
    y2 = _recip(s, RECIP)[:, None]
    if LOOP:
        for k0 in range(0, K, BLOCK_K):
            m = rmask[:, None] & (k0 + cols[None, :] < K)
            w = _to_f32(tl.load(w_rows + k0 + cols[None, :], mask=m, other=0.0))
            tl.store(q_rows + k0 + cols[None, :], _encode(_div_by_scale(w, s2, y2, RECIP), HW_FP8, HW_CVT), mask=m)
    else:
        tl.store(q_rows + cols[None, :], _encode(_div_by_scale(w, s2, y2, RECIP), HW_FP8, HW_CVT), mask=m)


@triton.jit
def _mx32_kernel(w_ptr, q_ptr, s_ptr, bad_ptr, N, K, stride_w, NG, GRID_K,
                 HW_FP8: tl.constexpr, HW_CVT: tl.constexpr, MX_FLOOR: tl.constexpr,
                 BLOCK_R: tl.constexpr, GROUPS: tl.constexpr):
    """[BLOCK_R, GROUPS * 32] tiles (loaded 2-D, so a warp reads a contiguous row segment), viewed as
    [BLOCK_R, GROUPS, 32] for the group amax: the reshape keeps each thread's 16 values, so the reduction is in
    registers plus one shuffle, with no layout conversion. NG = ceil(K / 32) is the scale row stride; GRID_K the
    number of column tiles (1-D grid, column tile fastest)."""
    pid = tl.program_id(0)
    pid_k = pid % GRID_K
    pid_r = pid // GRID_K
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = pid_k * (GROUPS * 32) + tl.arange(0, GROUPS * 32)
    g = pid_k * GROUPS + tl.arange(0, GROUPS)
    r64 = rows[:, None].to(tl.int64)
    m = (rows[:, None] < N) & (cols[None, :] < K)
    w = _to_f32(tl.load(w_ptr + r64 * stride_w + cols[None, :], mask=m, other=0.0))
    wg = tl.reshape(w, [BLOCK_R, GROUPS, 32])
    amax = tl.reduce(tl.abs(wg), 2, _max_nan)
    _count_bad_groups(amax, bad_ptr)
    e = _mx_exponent(amax, MX_FLOOR)
    # 2^-e is a normal fp32 (e <= 120 for any finite amax), so w * 2^-e is the correctly rounded w / 2^e.
    q = _encode(tl.reshape(wg * _pow2(-e)[:, :, None], [BLOCK_R, GROUPS * 32]), HW_FP8, HW_CVT)
    tl.store(q_ptr + r64 * K + cols[None, :], q, mask=m)
    gmask = (rows[:, None] < N) & (g[None, :] < NG)
    tl.store(s_ptr + rows[:, None].to(tl.int64) * NG + g[None, :], (e + 127).to(tl.uint8), mask=gmask)


@triton.jit
def _tensor_amax_kernel(w_ptr, aux_ptr, N, K, stride_w, GRID_K,
                        BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, ITERS: tl.constexpr):
    """Pass 1 of per-tensor scaling: ITERS row tiles per program (loads issued back to back), one atomic per program.
    aux[0] holds the amax as int32 bits (non-negative floats order like their bits; NaN's bits exceed +Inf's, so
    a NaN propagates); aux[1] counts non-finite programs. 1-D grid, column tile fastest."""
    pid = tl.program_id(0)
    pid_k = pid % GRID_K
    pid_r = pid // GRID_K
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    cmask = cols[None, :] < K
    acc = tl.zeros([BLOCK_R, BLOCK_K], tl.float32)
    for i in tl.static_range(ITERS):
        rows = (pid_r * ITERS + i) * BLOCK_R + tl.arange(0, BLOCK_R)
        m = (rows[:, None] < N) & cmask
        w = tl.load(w_ptr + rows[:, None].to(tl.int64) * stride_w + cols[None, :], mask=m, other=0.0)
        acc = _max_nan(acc, tl.abs(_to_f32(w)))
    amax = tl.reduce(tl.reduce(acc, 1, _max_nan), 0, _max_nan)
    tl.atomic_max(aux_ptr, amax.to(tl.int32, bitcast=True))
    if _nonfinite(amax):
        tl.atomic_add(aux_ptr + 1, 1)


@triton.jit
def _tensor_cast_kernel(w_ptr, q_ptr, s_ptr, aux_ptr, N, K, stride_w, GRID_K,
                        HW_FP8: tl.constexpr, HW_CVT: tl.constexpr, RECIP: tl.constexpr,
                        BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """Pass 2: the tiles in reverse order, so the first programs read what the amax pass read last (in L2)."""
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    pid_k = pid % GRID_K
    pid_r = pid // GRID_K
    s = amax_to_scale(tl.load(aux_ptr).to(tl.float32, bitcast=True))
    if (pid_k == 0) & (pid_r == 0):
        tl.store(s_ptr, s)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    m = (rows[:, None] < N) & (cols[None, :] < K)
    r64 = rows[:, None].to(tl.int64)
    w = _to_f32(tl.load(w_ptr + r64 * stride_w + cols[None, :], mask=m, other=0.0))
    q = _encode(_div_by_scale(w, s, _recip(s, RECIP), RECIP), HW_FP8, HW_CVT)
    tl.store(q_ptr + r64 * K + cols[None, :], q, mask=m)


# --- tuning rule and launcher ---------------------------------------------------------------------------------

# Elements one program holds in registers. 8192 over 8 warps (fp8_block: 16384 over 16) is 32 fp32 values per
# thread: 53-62 registers on sm_90, so 2-4 programs (32 warps) stay resident per SM and the loads of some overlap
# the arithmetic of others; 64 per thread (8 warps for a 128x128 block) took 97 registers, 16 warps per SM.
_TILE_ELEMS = 8192
# Longest row kept whole in registers by fp8_row (16384 values over 16 warps = 32 per thread).
ROW_MAX_BLOCK_K = 16384


@dataclasses.dataclass(frozen=True)
class WeightQuantConfig(KernelConfig):
    """Launch parameters of one weight quantization (`select_config` picks them per shape and target).

    block_r x block_k: the tile of one program (fp8_block: 128 x 128; mxfp8: block_k = 32 * groups; fp8_row:
    block_k >= K unless row_loop). amax_iters: row tiles per program of the per-tensor amax pass.
    hw_cvt: hardware fp32 -> e4m3 cast (only where it is exact). recip_div: Markstein division by a per-group
    reciprocal (needs a fused FMA and weights of <= 11 significant bits)."""

    block_r: int
    block_k: int
    num_warps: int
    hw_cvt: bool = False
    recip_div: bool = False
    row_loop: bool = False
    amax_iters: int = 1

    def __post_init__(self) -> None:
        for name in ("block_r", "block_k", "num_warps", "amax_iters"):
            v = getattr(self, name)
            if v < 1 or v & (v - 1):
                raise ValueError(f"WeightQuantConfig.{name} must be a power of two >= 1, got {v}")


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


def _k_tile(k: int) -> int:
    """Column tile of the per-tensor passes: the least padding of K among 128/256/512, the widest on ties."""
    return min((512, 256, 128), key=lambda b: (-(-k // b) * b, -b))


@functools.lru_cache(maxsize=256)
def select_config(fmt: Format, n: int, k: int, dtype: torch.dtype, target: Target, hw_fp8: bool,
                  fused_fma: bool) -> WeightQuantConfig:
    """The launch rule (a pure function: testable without a GPU). `fused_fma` is False under the CPU interpreter,
    whose fma rounds twice."""
    hw_cvt = hw_fp8 and exact_hw_e4m3_cast(target)
    recip = fused_fma and dtype in (torch.bfloat16, torch.float16)  # the exhaustively checked input types
    if fmt is Format.FP8_BLOCK:
        return WeightQuantConfig(WEIGHT_BLOCK, WEIGHT_BLOCK, 16, hw_cvt, recip)
    if fmt is Format.MXFP8:
        groups = min(16, _pow2_at_least(-(-k // MX_GROUP)))
        return WeightQuantConfig(max(1, _TILE_ELEMS // (MX_GROUP * groups)), MX_GROUP * groups, 8, hw_cvt, False)
    if fmt is Format.FP8_ROW:
        bk = max(16, _pow2_at_least(k))
        if bk > ROW_MAX_BLOCK_K:
            return WeightQuantConfig(1, 8192, 8, hw_cvt, recip, row_loop=True)
        return WeightQuantConfig(max(1, _TILE_ELEMS // bk), bk, 16 if bk >= 16384 else 8, hw_cvt, recip)
    # Per-tensor: 2 row tiles per amax program (loads issued back to back; 7168 programs for 28672x4096, so no
    # partial last wave to speak of, and as many atomics, spread over the pass).
    bk = _k_tile(k)
    return WeightQuantConfig(_TILE_ELEMS // bk, bk, 8, hw_cvt, recip, amax_iters=2)


def quantize_weight(w: torch.Tensor, fmt: Format, mx_scale_mode: MXScaleMode, *, hw_fp8: bool = True,
                    config: WeightQuantConfig | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(qdata e4m3 [N, K], scale in the format's layout, device int32 0-dim: nonzero iff a weight is NaN/Inf).

    Nothing here reads a device value: `dispatch.quantize` reads the counter once. `hw_fp8=False` writes uint8
    codes through the software encoder (sm_80 and the CPU interpreter). `config` overrides `select_config`."""
    n, k = w.shape
    if w.stride(1) != 1:  # a transposed view: the kernels need unit stride along K to vectorize
        w = w.contiguous()
    dev = w.device
    if config is None:
        config = select_config(fmt, n, k, w.dtype, detect(dev), hw_fp8, dev.type != "cpu")
    c = config
    qdata = torch.empty((n, k), dtype=torch.float8_e4m3fn, device=dev)
    q_out = qdata if hw_fp8 else qdata.view(torch.uint8)
    aux = torch.zeros(2, dtype=torch.int32, device=dev)  # [amax bits (per-tensor), non-finite groups]
    bad = aux[1]
    sw = w.stride(0)
    flags = dict(HW_FP8=hw_fp8, HW_CVT=c.hw_cvt and hw_fp8, num_warps=c.num_warps)
    if fmt is Format.FP8_BLOCK:
        scale = torch.empty(scale_shape(fmt, n, k), dtype=torch.float32, device=dev)
        nb, kb = scale.shape
        _block128_kernel[(nb * kb,)](w, q_out, scale, bad, n, k, sw, kb, RECIP=c.recip_div, BLOCK=WEIGHT_BLOCK,
                                     **flags)
    elif fmt is Format.FP8_ROW:
        scale = torch.empty(scale_shape(fmt, n, k), dtype=torch.float32, device=dev)
        _row_kernel[(triton.cdiv(n, c.block_r),)](w, q_out, scale, bad, n, k, sw, RECIP=c.recip_div,
                                                   BLOCK_R=c.block_r, BLOCK_K=c.block_k, LOOP=c.row_loop, **flags)
    elif fmt is Format.MXFP8:
        scale = torch.empty(scale_shape(fmt, n, k), dtype=torch.uint8, device=dev)
        ng = scale.shape[1]
        groups = c.block_k // MX_GROUP
        gk = triton.cdiv(ng, groups)
        _mx32_kernel[(gk * triton.cdiv(n, c.block_r),)](w, q_out, scale, bad, n, k, sw, ng, gk,
                                                         MX_FLOOR=mx_scale_mode is MXScaleMode.FLOOR,
                                                         BLOCK_R=c.block_r, GROUPS=groups, **flags)
        scale = scale.view(torch.float8_e8m0fnu)
    else:
        scale = torch.empty((), dtype=torch.float32, device=dev)
        gk = triton.cdiv(k, c.block_k)
        _tensor_amax_kernel[(gk * triton.cdiv(n, c.block_r * c.amax_iters),)](
            w, aux, n, k, sw, gk, BLOCK_R=c.block_r, BLOCK_K=c.block_k, ITERS=c.amax_iters, num_warps=c.num_warps)
        _tensor_cast_kernel[(gk * triton.cdiv(n, c.block_r),)](w, q_out, scale, aux, n, k, sw, gk, RECIP=c.recip_div,
                                                             BLOCK_R=c.block_r, BLOCK_K=c.block_k, **flags)
    assert MX_GROUP == 32 and WEIGHT_BLOCK == 128  # the kernels' group shapes assume these
    return qdata, scale, bad

"""`@triton.jit` helpers shared by every Triton kernel of this package: e4m3 / e8m0 decode and encode.

Why software paths exist at all: Triton on sm_80 rejects `fp8e4nv` even as a pointer type, so there the
weight codes travel as uint8 and are decoded with integer/float arithmetic below. The same software path
is what the CPU interpreter tests run, because the interpreter rounds fp32 -> fp8 casts wrongly and does
not saturate.

Interpreter-safe (exact under TRITON_INTERPRET=1 and on every GPU target):
  - `e4m3_to_f32(code_u8)`           software e4m3fn decode (sign, subnormals, NaN codes 0x7f/0xff)
  - `f32_to_e4m3(v)`                 software fp32 -> e4m3fn code, round-to-nearest-even, saturating
  - `e4m3_round(v)`                  the fp32 value of `f32_to_e4m3(v)` (sm_80 W8A8: exact codes as floats)
  - `e8m0_to_f32(code_u8)`           2^(code - 127) built from bits (code 0 -> 2^-127, an fp32 subnormal)
  - `load_w_f32(ptrs, mask, False)`  uint8 codes + software decode
  - `quantize_e4m3(v, False, False)` software encode (uint8 codes)
Hardware-only (sm_89+, gfx1201; wrong or rejected under the interpreter / on sm_80):
  - `load_w_f32(ptrs, mask, True)`   fp8e4nv pointer, `.to(tl.float32)` (cvt e4m3 -> f16/f32)
  - `quantize_e4m3(v, True, False)`  software encode, bitcast to fp8e4nv (sm_89, gfx1201: exact)
  - `quantize_e4m3(v, True, True)`   `.to(tl.float8e4nv)` after a clamp to +-448 (sm_90 only: exact there)
"""

from __future__ import annotations

import triton
import triton.language as tl

E4M3_MAX: tl.constexpr = tl.constexpr(448.0)
# Shared with dispatch.formats.AMAX_FLOOR: an all-zero group gets scale AMAX_FLOOR / 448, codes +0.
AMAX_FLOOR: tl.constexpr = tl.constexpr(1e-12)


@triton.jit
def e4m3_to_f32(code):
    """uint8 e4m3fn codes -> exact fp32 values.

    The 7 magnitude bits are placed into an fp16's exponent+mantissa field (fp16 has 5 exponent bits,
    bias 15, e4m3 has 4, bias 7): the fp16 value is the e4m3 value * 2^-8 for normals AND subnormals
    (an e4m3 subnormal m * 2^-9 lands on the fp16 subnormal m * 2^-17). fp16 -> fp32 is exact and never
    flushes, then * 256 is exact; so no branch on the exponent is needed and no fp32 subnormal appears
    (fp32 denormals may be flushed by some backends; fp16 ones are not).
    """
    c = code.to(tl.int32)
    mag = c & 0x7F
    bits16 = (mag << 7) | ((c & 0x80) << 8)
    v = bits16.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32) * 256.0
    # e4m3fn has no infinities; S.1111.111 is NaN (would otherwise decode to +-480).
    nan = tl.full(v.shape, 0x7FC00000, tl.int32).to(tl.float32, bitcast=True)
    return tl.where(mag == 0x7F, nan, v)


@triton.jit
def f32_to_e4m3(v):
    """fp32 -> uint8 e4m3fn code: round-to-nearest-even, saturating to +-448 (Inf -> +-448), NaN -> 0x7f|sign.

    Matches torch's `x.clamp(-448, 448).to(torch.float8_e4m3fn)` bit for bit, including -0.0 -> 0x80.
    """
    bits = v.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80  # arithmetic shift; masked to the one sign bit
    a = tl.abs(v)
    is_nan = a != a
    a = tl.minimum(a, 448.0)  # saturation (Inf included); NaN handled by is_nan below
    # Subnormal targets (a < 2^-6): code = rne(a * 2^9). Adding 2^23 makes the fp32 adder round to an
    # integer with round-to-nearest-even; a * 512 is exact, so an FMA contraction gives the same bits.
    # rne may give 8 = 0x08, which is exactly the smallest normal 2^-6: the encodings agree.
    sub = (a * 512.0 + 8388608.0).to(tl.int32, bitcast=True) - 0x4B000000
    # Normal targets: drop 20 of the 23 mantissa bits with round-to-nearest-even on the integer bits
    # (a carry into the exponent is the correct rounding), then rebias 127 -> 7 (120 << 3).
    ab = a.to(tl.int32, bitcast=True)
    rounded = (ab + 0x7FFFF + ((ab >> 20) & 1)) >> 20
    nrm = rounded - (120 << 3)
    mag = tl.where(a < 0.015625, sub, nrm)
    mag = tl.where(is_nan, 0x7F, mag)
    return (mag | sign).to(tl.uint8)


@triton.jit
def e4m3_round(v):
    """fp32 value of the e4m3 code `f32_to_e4m3(v)` (software; exact)."""
    return e4m3_to_f32(f32_to_e4m3(v))


@triton.jit
def e8m0_to_f32(code):
    """uint8 e8m0 codes -> 2^(code - 127) exactly, from bits. Code 0 is 2^-127 (fp32 subnormal bits
    0x00400000: a shift of 0 << 23 would give +0), code 255 is NaN."""
    c = code.to(tl.int32)
    bits = tl.where(c == 0, 0x00400000, c << 23)
    bits = tl.where(c == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def load_w_f32(ptrs, mask, HW_FP8: tl.constexpr):
    """Weight codes -> fp32. HW_FP8: `ptrs` points at fp8e4nv (hardware cvt); else at uint8 codes."""
    if HW_FP8:
        w = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    else:
        w = e4m3_to_f32(tl.load(ptrs, mask=mask, other=0))
    return w


@triton.jit
def quantize_e4m3(v, HW_FP8: tl.constexpr, HW_CVT: tl.constexpr = False):
    """fp32 (already divided by its scale) -> e4m3 codes: an fp8e4nv tensor if HW_FP8, else uint8 codes.

    HW_CVT (default False: exact software encoder): use the hardware cast. Only where Triton lowers it to a direct, correctly rounded fp32 -> e4m3
    instruction (sm_90: cvt.rn.satfinite.e4m3x2.f32). Triton 3.6 lowers it on sm_89 through f16
    (cvt.rn.satfinite.e4m3x2.f16x2: double rounding, not bit-identical at near-ties) and on gfx1201
    through its own bit manipulation, so those targets use the exact software encoder and a bitcast.
    The explicit clamp to +-448 makes the cast's saturation mode irrelevant (the reference clamps too).
    It must propagate NaN: Triton lowers a symmetric clamp to `min.xorsign.abs.f32`, which returns the
    non-NaN operand (NaN -> +-448, a finite code where torch's clamp + cast gives the NaN code; this
    failed on the H200 with a NaN activation). PropagateNan.ALL emits `min.NaN.xorsign.abs.f32` (same
    result for every non-NaN input), and cvt.rn.satfinite maps NaN to the NaN code.
    """
    if HW_FP8 and HW_CVT:
        q = tl.clamp(v, -448.0, 448.0, propagate_nan=tl.PropagateNan.ALL).to(tl.float8e4nv,
                                                                            fp_downcast_rounding="rtne")
    elif HW_FP8:
        q = f32_to_e4m3(v).to(tl.float8e4nv, bitcast=True)
    else:
        q = f32_to_e4m3(v)
    return q


@triton.jit
def amax_to_scale(amax):
    """Dynamic scale of a group: max(amax, AMAX_FLOOR) / 448 as an IEEE division (div.rn.f32), as the
    reference computes it. NaN amax stays NaN (propagates)."""
    a = tl.where(amax < AMAX_FLOOR, AMAX_FLOOR, amax)  # NaN < floor is False: NaN kept
    return tl.math.div_rn(a, tl.full(a.shape, 448.0, tl.float32))


# The PTX both e4m3 -> bf16 decodes start with (see e4m3_to_bf16_spread): two codes of $1 spread into the bf16 pair s
# (value x 2^-120), m = 2^120 in both halves, z = -0 in both halves. Each decode's block appends its FMAs.
_SPREAD_PREFIX = """{
        .reg .b32 t, s, m, z;
        cvt.u32.u16 t, $1;
        prmt.b32 s, t, 0, 0x9180;
        shl.b32 s, s, 4;
        and.b32 s, s, 0x87f087f0;
        mov.b32 m, 0x7b807b80;
        mov.b32 z, 0x80008000;
        """
_ASM_SPREAD = tl.constexpr(_SPREAD_PREFIX + """fma.rn.bf16x2 $0, s, m, z;
        }""")
_ASM_SPREAD_SCALED = tl.constexpr(_SPREAD_PREFIX + """fma.rn.bf16x2 s, s, m, z;
        fma.rn.bf16x2 $0, s, $2, z;
        }""")
_ASM_SPREAD_FOLDED = tl.constexpr(_SPREAD_PREFIX + """fma.rn.bf16x2 $0, s, $2, z;
        }""")


@triton.jit
def e4m3_to_bf16_spread(codes):
    """e4m3 codes (uint8) -> bf16 values, exact for every non-NaN code, in integer ops and one bf16x2 FMA per pair
    (NVIDIA PTX only: not for HIP, not for the interpreter).

    Triton lowers `fp8e4nv.to(bf16)` on sm_90 as F2FP (e4m3x2 -> f16x2) then one F2F.BF16.F16 per element; F2F
    issues at a quarter of the ALU rate, and in the W8A16 GEMM's main loop it costs as many SM cycles as the wgmma
    it feeds (32 per thread per 128 x 64 weight tile). This is kernels_cuda's fp8d_decode4_bf16x2_fast, the same
    instructions: a sign-extending prmt puts two codes in two 16-bit halves, a shift and an AND place the 7
    magnitude bits on bf16's exponent/mantissa fields (the value times 2^-120; e4m3 subnormals land on bf16
    subnormals), and fma.rn.bf16x2 (no flush) by 2^120 plus -0 restores the value exactly. NaN codes read as
    +-480, as in the CUDA GEMVs (dispatch.quantize and from_checkpoint never produce them).
    """
    return tl.inline_asm_elementwise(
        asm=_ASM_SPREAD,
        constraints="=r,h",
        args=[codes],
        dtype=tl.bfloat16,
        is_pure=True,
        pack=2,
    )


@triton.jit
def e8m0_to_bf16(code):
    """uint8 e8m0 codes -> 2^(code - 127) exactly as bf16 (bf16 has fp32's exponent range): the code shifted onto
    the exponent field; code 0 is 2^-127, the bf16 subnormal 0x0040; code 255 is NaN."""
    c = code.to(tl.int32)
    bits = tl.where(c == 0, 0x0040, c << 7)
    bits = tl.where(c == 255, 0x7FC0, bits)
    return bits.to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def e4m3_to_bf16_scaled(codes, scale):
    """e4m3 codes (uint8) x bf16 powers of two -> bf16: e4m3_to_bf16_spread, then one bf16x2 FMA by the scale with
    a -0 addend (one rounding of code x 2^e, as the fp32 product rounded to bf16 gives it: subnormal results
    kept, overflow to inf, a NaN scale gives NaN). NVIDIA PTX only."""
    return tl.inline_asm_elementwise(
        asm=_ASM_SPREAD_SCALED,
        constraints="=r,h,r",
        args=[codes, scale],
        dtype=tl.bfloat16,
        is_pure=True,
        pack=2,
    )


# Largest e8m0 code whose MX scale folds into the decode's one FMA (e4m3_to_bf16_mx_folded): 2^(code - 7) is a bf16
# number up to code 134 (scale 2^7, group amax 448 x 128). kernels_cuda's fp8d_mx_decode_mul folds the same way.
MX_FOLD_MAX: tl.constexpr = tl.constexpr(134)


@triton.jit
def e8m0_to_bf16_fold_mul(code):
    """uint8 e8m0 code c <= MX_FOLD_MAX -> 2^(c - 7) as bf16 (the multiplier e4m3_to_bf16_mx_folded takes): the code
    plus 120 on the exponent field, no special cases (c = 0 gives 2^-7; codes above MX_FOLD_MAX, 255 among them,
    are the caller's to exclude)."""
    return ((code.to(tl.int32) + 120) << 7).to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def e4m3_to_bf16_mx_folded(codes, mul):
    """e4m3 codes (uint8) x 2^(c - 127) -> bf16 in ONE bf16x2 FMA per pair, `mul` = e8m0_to_bf16_fold_mul(c).

    The spread is the value times 2^-120 (exact, subnormals kept), so one FMA by 2^(c - 7) with a -0 addend forms
    value x 2^(c - 127) with a single rounding: the bits e4m3_to_bf16_scaled gives with its two FMAs (the first
    of them exact). Valid for c <= MX_FOLD_MAX only. NVIDIA PTX only."""
    return tl.inline_asm_elementwise(
        asm=_ASM_SPREAD_FOLDED,
        constraints="=r,h,r",
        args=[codes, mul],
        dtype=tl.bfloat16,
        is_pure=True,
        pack=2,
    )

// fp8_common.cuh: format constants, enum codes shared with the Python launchers, and the small exact
// conversions every kernel family uses (activation scale, e4m3 encode with saturation, e8m0 decode,
// output stores). Vendor differences stay in portability.cuh.
#pragma once
#include "portability.cuh"

// The one table of format numbers is dispatch/formats.py; compiler.py passes it as -D. A source compiled
// without them must not silently pick its own literals.
#if !defined(FP8D_E4M3_MAX) || !defined(FP8D_AMAX_FLOOR) || !defined(FP8D_WEIGHT_BLOCK) || \
    !defined(FP8D_ACT_GROUP) || !defined(FP8D_MX_GROUP) || !defined(FP8D_E8M0_BIAS)
#error "format constants missing: compile through kernels_cuda.compiler (it passes dispatch.formats as -D)"
#endif

// The GEMV kernels walk K in steps of 128 with each of 4 lanes owning 32 contiguous codes per row: one
// step is one fp8_block K block and one lane-chunk is one MX group. Other format constants need a
// different lane mapping, so refuse them here instead of producing wrong scales.
static_assert(FP8D_WEIGHT_BLOCK == 128, "GEMV K step assumes 128-wide weight blocks");
static_assert(FP8D_ACT_GROUP == 128, "GEMV K step assumes 128-wide activation groups");
static_assert(FP8D_MX_GROUP == 32, "GEMV lane chunk assumes 32-wide MX groups");
#define FP8D_KSTEP 128
#define FP8D_LANE_CHUNK 32

// Enum codes: must equal kernels_cuda/_kinds.py (tests check the pairs).
#define FP8D_SCALE_TENSOR 0
#define FP8D_SCALE_ROW 1
#define FP8D_SCALE_BLOCK 2
#define FP8D_SCALE_MX 3

#define FP8D_DTYPE_BF16 0
#define FP8D_DTYPE_F16 1
#define FP8D_DTYPE_F32 2

#define FP8D_ACTQ_TENSOR 0  // W8A8 fp8_tensor: per-tensor x scale  x per-tensor w scale
#define FP8D_ACTQ_TOKEN 1   // W8A8 fp8_row:    per-token x scale   x per-row w scale
#define FP8D_ACTQ_GROUP 2   // W8A8 fp8_block:  1x128 x scales      x 128x128 w scales

// Activation scale exactly as dispatch.activation.scale_from_amax: max(amax, floor) / 448 with an IEEE
// division, NaN propagating (amax < floor is false for NaN, so NaN passes through).
__device__ __forceinline__ float fp8d_act_scale(float amax) {
  const float a = (amax < FP8D_AMAX_FLOOR) ? FP8D_AMAX_FLOOR : amax;
  return __fdiv_rn(a, FP8D_E4M3_MAX);
}

// clamp(v, -448, 448) keeping NaN (fminf/fmaxf would turn a NaN into the bound).
__device__ __forceinline__ float fp8d_clamp_e4m3(float v) {
  return (v != v) ? v : fminf(fmaxf(v, -FP8D_E4M3_MAX), FP8D_E4M3_MAX);
}

// e4m3 codes of v / s for four values: IEEE division (not a multiply by 1/s), clamp, RNE.
__device__ __forceinline__ unsigned fp8d_quant4(float a, float b, float c, float d, float s) {
  return fp8d_encode4(fp8d_clamp_e4m3(__fdiv_rn(a, s)), fp8d_clamp_e4m3(__fdiv_rn(b, s)),
                      fp8d_clamp_e4m3(__fdiv_rn(c, s)), fp8d_clamp_e4m3(__fdiv_rn(d, s)));
}

// e8m0 code -> 2^(code - 127) as f32 (code 0 is 2^-127, an f32 subnormal; 255 is NaN).
__device__ __forceinline__ float fp8d_e8m0_to_f32(unsigned code) {
  if (code == 0xffu) return __uint_as_float(0x7fc00000u);
  return code ? __uint_as_float(code << 23) : __uint_as_float(0x00400000u);
}

__device__ __forceinline__ float fp8d_load_as_f32(const void* p, long long i, int kind) {
  if (kind == FP8D_DTYPE_F32) return reinterpret_cast<const float*>(p)[i];
  const unsigned short h = reinterpret_cast<const unsigned short*>(p)[i];
  return kind == FP8D_DTYPE_BF16 ? fp8d_bf16_bits_to_f32(h) : fp8d_f16_bits_to_f32(h);
}

__device__ __forceinline__ void fp8d_store_from_f32(void* p, long long i, float v, int kind) {
  if (kind == FP8D_DTYPE_F32) {
    reinterpret_cast<float*>(p)[i] = v;
  } else {
    reinterpret_cast<unsigned short*>(p)[i] = kind == FP8D_DTYPE_BF16 ? fp8d_f32_to_bf16_bits(v) : fp8d_f32_to_f16_bits(v);
  }
}

// Word i (0..3) of a 16-byte load; i is a compile-time constant after unrolling, so this is a register.
__device__ __forceinline__ unsigned fp8d_word(const uint4& v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

// ---- Programmatic dependent launch (sm_90+) -------------------------------------------------------------
// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may start before the previous
// kernel in the stream has finished; fp8d_wait_prior_grid() blocks until that kernel has completed and its
// writes are visible (everything read before it must not be written by that kernel). A kernel calls
// fp8d_allow_dependent_grid() to let its dependent start early. Launched without the attribute (and on
// targets without griddepcontrol) both are no-ops, so the same binary serves plain launches.
#if FP8D_IS_CUDA && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
__device__ __forceinline__ void fp8d_wait_prior_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void fp8d_allow_dependent_grid() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
#else
__device__ __forceinline__ void fp8d_wait_prior_grid() {}
__device__ __forceinline__ void fp8d_allow_dependent_grid() {}
#endif

// ---- e4m3 -> bf16x2 / f16x2 in three integer instructions per pair ------------------------------------
// prmt with a selector nibble >= 8 replicates the sign of the selected byte, so one prmt turns two codes
// into two sign-extended 16-bit halves. Shifted left by 4 (bf16) or 7 (f16), the 7 magnitude bits land on
// the exponent/mantissa fields and a sign copy on bit 15; one AND clears the other sign copies (bits 11-14
// resp. 14, and the bits the low half shifts into the high one). The result is the value times 2^-120
// (bf16) or 2^-8 (f16); e4m3 subnormals land on subnormals of the wider type, so the power-of-two multiply
// that restores the value (fp8d_bf16x2_fma keeps subnormals: no -ftz) is exact. The NaN codes 0x7f/0xff
// read as +-480 like fp8d_decode4_bf16x2 (dispatch.quantize refuses non-finite weights and
// dispatch.from_checkpoint rejects NaN codes; only a QWeight built by hand from raw codes can hold them).
// One instruction fewer per pair than the portable decoders (a prmt, two ANDs and a shift-add).
#if FP8D_IS_CUDA
__device__ __forceinline__ unsigned fp8d_prmt_sext_pair(unsigned codes, unsigned sel) {
  unsigned r;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(r) : "r"(codes), "r"(sel));
  return r;
}
#endif

// Four codes -> lo = (c0, c1), hi = (c2, c3) as bf16x2, exact for every non-NaN code. `mul` as in
// fp8d_decode4_bf16x2: 2^120 restores the value, fp8d_mx_decode_mul also applies an MX scale.
__device__ __forceinline__ void fp8d_decode4_bf16x2_fast(unsigned codes, unsigned& lo, unsigned& hi,
                                                         unsigned mul = 0x7b807b80u) {
#if FP8D_IS_CUDA
  const unsigned s0 = fp8d_prmt_sext_pair(codes, 0x9180u);  // [c0, sign(c0), c1, sign(c1)]
  const unsigned s1 = fp8d_prmt_sext_pair(codes, 0xb3a2u);  // [c2, sign(c2), c3, sign(c3)]
  lo = fp8d_bf16x2_fma((s0 << 4) & 0x87f087f0u, mul, 0x80008000u);  // x 2^120, -0 keeps -0
  hi = fp8d_bf16x2_fma((s1 << 4) & 0x87f087f0u, mul, 0x80008000u);
#else
  fp8d_decode4_bf16x2(codes, lo, hi, mul);
#endif
}

// ---- MX scales folded into the decode (W8A16 mxfp8) --------------------------------------------------------
// The bf16 decoders restore value x 2^-120 with one fma by 2^120. For a weight of an MX group with e8m0 code c
// (scale 2^(c-127)), one fma by 2^(c-7) gives value x 2^(c-127) with a single rounding: the same bits as the
// exact decode followed by a multiply by 2^(c-127), one bf16x2 fma per pair fewer. 2^(c-7) is a bf16 number up
// to c = 134 (scale 2^7); above it the first fma uses 2^127 and fp8d_mx_rest_mul (2^(c-134)) follows (weights
// beyond 448 x 128: real checkpoints have none, so the kernel branches on a warp vote). c = 255 is NaN.
#define FP8D_MX_FOLD_MAX 134u
__device__ __forceinline__ unsigned fp8d_mx_decode_mul(unsigned c) {
  const unsigned h = (c == 0xffu) ? 0x7fc0u : ((c < FP8D_MX_FOLD_MAX ? c : FP8D_MX_FOLD_MAX) + 120u) << 7;
  return h | (h << 16);
}
// fp8d_mx_decode_mul for a code the caller knows is <= FP8D_MX_FOLD_MAX (the W8A16 GEMV's main policy: its CTA scanned
// its rows' codes first): (c + 120) << 7 in both halves, one IMAD instead of a clamp, a NaN select and three shifts.
__device__ __forceinline__ unsigned fp8d_mx_folded_mul(unsigned c) { return c * 0x00800080u + 0x3c003c00u; }
__device__ __forceinline__ unsigned fp8d_mx_rest_mul(unsigned c) {
  const unsigned h = (c > FP8D_MX_FOLD_MAX && c != 0xffu) ? (c - 7u) << 7 : 0x3f80u;  // 2^(c-134), else 1
  return h | (h << 16);
}

// Four codes -> two f16x2 words: hardware F2FP where it exists, else the sign-extension decode (x 2^8).
__device__ __forceinline__ void fp8d_decode4_f16x2_fast(unsigned codes, unsigned& lo, unsigned& hi) {
#if FP8D_IS_CUDA && !FP8D_HW_CVT
  const unsigned s0 = fp8d_prmt_sext_pair(codes, 0x9180u);
  const unsigned s1 = fp8d_prmt_sext_pair(codes, 0xb3a2u);
  lo = fp8d_f16x2_fma((s0 << 7) & 0xbf80bf80u, 0x5c005c00u, 0x80008000u);
  hi = fp8d_f16x2_fma((s1 << 7) & 0xbf80bf80u, 0x5c005c00u, 0x80008000u);
#else
  fp8d_decode4_f16x2(codes, lo, hi);
#endif
}

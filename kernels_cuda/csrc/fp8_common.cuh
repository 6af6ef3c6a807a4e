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
// ... and as a bf16x2 word (both halves), for scaling decoded bf16 weights. bf16 shares f32's exponent.
__device__ __forceinline__ unsigned fp8d_e8m0_to_bf16x2(unsigned code) {
  const unsigned h = (code == 0xffu) ? 0x7fc0u : (code ? (code << 7) : 0x0040u);
  return h | (h << 16);
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

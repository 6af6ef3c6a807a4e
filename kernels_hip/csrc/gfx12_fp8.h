// gfx12_fp8.h: the AMD side of the vendor layer the shared kernel sources call (kernels_cuda/csrc/
// portability.cuh includes this file when compiled by hipRTC or clang -x hip).
//
// Everything here is an exact operation on AMD hardware (conversions that are bit-exact by the ISA's
// definition, shuffles, a matrix instruction); the surrounding arithmetic stays in the shared sources.
// What each arch's fp8 instructions decode comes from fp8_format_table.h (generated from
// dispatch/formats.py): gfx12 (RDNA4) reads OCP e4m3fn, the format our codes are stored in; gfx942
// reads e4m3fnuz and needs the two fixes in fp8d_hw_prepare4/FP8D_HW_DECODE_SCALE.
#pragma once

#include "fp8_format_table.h"

#if !defined(__HIPCC_RTC__) && !defined(FP8D_HIP_OFFLINE_SHIM)
#include <hip/hip_runtime.h>
#endif

// Flags portability.cuh reads. Hardware fp8 conversion on every arch in the table; no mma.sync-shaped fp8
// instruction (RDNA4's matrix op has other fragments: the W8A8 path that uses it is w8a8_wmma_gfx12.hip).
#define FP8D_HW_CVT 1
#define FP8D_HAS_FP8_MMA 0
#define FP8D_VENDOR_MMA 0

// A CUDA warp and a gfx12 wave32 are the same width, so sources written for 32 lanes run unchanged.
#define FP8D_WARP_SIZE FP8D_HW_WAVE_SIZE

typedef float fp8d_f32x2 __attribute__((ext_vector_type(2)));
typedef float fp8d_f32x8 __attribute__((ext_vector_type(8)));
typedef int fp8d_i32x2 __attribute__((ext_vector_type(2)));

// --- fp8 -> f32 -----------------------------------------------------------------------------------
// On e4m3fnuz hardware the storage code 0x80 (-0 in e4m3fn) would read as NaN: clear the sign of every
// byte whose other 7 bits are zero. 3 integer ops per 4 codes; compiled out on gfx12.
__device__ __forceinline__ unsigned fp8d_hw_prepare4(unsigned codes) {
#if FP8D_HW_FNUZ
  const unsigned zero7 = ~((codes & 0x7f7f7f7fu) + 0x7f7f7f7fu) & 0x80808080u;  // high bit set: low 7 bits 0
  return codes & ~zero7;
#else
  return codes;
#endif
}

// Four e4m3fn codes (byte i of `codes` = element i, little-endian like memory) -> four floats, through
// two v_cvt_pk_f32_fp8 (word_sel picks bytes 0-1 or 2-3). Exact: every e4m3 value is an f32.
__device__ __forceinline__ void fp8d_decode4(unsigned codes, float out[4]) {
  const unsigned c = fp8d_hw_prepare4(codes);
  const fp8d_f32x2 lo = __builtin_amdgcn_cvt_pk_f32_fp8((int)c, false);
  const fp8d_f32x2 hi = __builtin_amdgcn_cvt_pk_f32_fp8((int)c, true);
  out[0] = lo.x * FP8D_HW_DECODE_SCALE;  // the multiply folds away where the scale is 1 (gfx12)
  out[1] = lo.y * FP8D_HW_DECODE_SCALE;
  out[2] = hi.x * FP8D_HW_DECODE_SCALE;
  out[3] = hi.y * FP8D_HW_DECODE_SCALE;
}

// One code (the low byte) -> float, through v_cvt_f32_fp8.
__device__ __forceinline__ float fp8d_decode1(unsigned code) {
  return __builtin_amdgcn_cvt_f32_fp8((int)fp8d_hw_prepare4(code & 0xffu), 0) * FP8D_HW_DECODE_SCALE;
}

// --- f32 -> fp8 -----------------------------------------------------------------------------------
#if !FP8D_HW_FNUZ
// Four floats -> four e4m3fn codes (element i -> byte i) through two v_cvt_pk_fp8_f32, rounding to
// nearest even (the default MODE register rounding, which HIP leaves untouched). The caller clamps to
// +-FP8D_TBL_E4M3_MAX first (our semantics saturate explicitly); NaN converts to NaN.
__device__ __forceinline__ unsigned fp8d_encode4(float a, float b, float c, float d) {
  int packed = __builtin_amdgcn_cvt_pk_fp8_f32(a, b, 0, false);
  packed = __builtin_amdgcn_cvt_pk_fp8_f32(c, d, packed, true);
  return (unsigned)packed;
}
#else
// e4m3fnuz hardware cannot produce e4m3fn's -0 or its 0x7f NaN: encode in software (portability.cuh's
// fp8d_sw_encode1, declared here, defined there), bit-exact but slower.
__device__ unsigned fp8d_sw_encode1(float v);
__device__ __forceinline__ unsigned fp8d_encode4(float a, float b, float c, float d) {
  return fp8d_sw_encode1(a) | (fp8d_sw_encode1(b) << 8) | (fp8d_sw_encode1(c) << 16) | (fp8d_sw_encode1(d) << 24);
}
#endif

// --- Wave reductions ------------------------------------------------------------------------------
// Butterfly over all lanes through ds_bpermute (what HIP's __shfl_xor compiles to): every lane ends
// with the result. No LDS allocation is involved; bpermute only uses the LDS crossbar.
__device__ __forceinline__ int fp8d_lane_id() {
#if FP8D_HW_WAVE_SIZE == 64
  return (int)__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
#else
  return (int)__builtin_amdgcn_mbcnt_lo(~0u, 0u);
#endif
}

__device__ __forceinline__ float fp8d_shfl_xor(float v, int mask) {
  const int src = fp8d_lane_id() ^ mask;
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute(src << 2, __builtin_bit_cast(int, v)));
}

// Read `v` of lane `src` (HIP's __shfl, without its width argument).
__device__ __forceinline__ unsigned fp8d_shfl_idx(unsigned v, int src) {
  return (unsigned)__builtin_amdgcn_ds_bpermute(src << 2, (int)v);
}

__device__ __forceinline__ float fp8d_warp_sum(float v) {
#pragma unroll
  for (int m = FP8D_WARP_SIZE / 2; m > 0; m >>= 1) v += fp8d_shfl_xor(v, m);
  return v;
}

// NaN-propagating max (fmaxf would drop a NaN; our activation scales must turn NaN when x has one).
__device__ __forceinline__ float fp8d_nanmax(float a, float b) { return (a > b || a != a) ? a : b; }

__device__ __forceinline__ float fp8d_warp_max(float v) {
#pragma unroll
  for (int m = FP8D_WARP_SIZE / 2; m > 0; m >>= 1) v = fp8d_nanmax(v, fp8d_shfl_xor(v, m));
  return v;
}

// p on any thread of the CTA (portability.cuh contract; a barrier every thread must reach): a flag in LDS between
// barriers (the shim has no __syncthreads_or).
__device__ __forceinline__ bool fp8d_cta_any(bool p) {
  __shared__ int fp8d_any_flag;
  if (threadIdx.x == 0) fp8d_any_flag = 0;
  __syncthreads();
  if (p) fp8d_any_flag = 1;
  __syncthreads();
  const bool r = fp8d_any_flag != 0;
  __syncthreads();  // the next call may reset the flag
  return r;
}

// --- WMMA (gfx12 only) ----------------------------------------------------------------------------
#if FP8D_HW_HAS_FP8_WMMA
// D[16x16] += A[16x16] * B[16x16], e4m3 x e4m3 -> f32 (v_wmma_f32_16x16x16_fp8_fp8, wave32).
// Fragment layout (RDNA4 ISA, WMMA section): for lane l, A supplies row (l % 16) and B column (l % 16),
// each with 8 K-consecutive codes: K 0..7 in lanes 0-15 and K 8..15 in lanes 16-31. D gives lane l
// column (l % 16), rows 8 * (l / 16) + e for its 8 floats e = 0..7. All 32 lanes must be active.
__device__ __forceinline__ fp8d_f32x8 fp8d_wmma_fp8(fp8d_i32x2 a, fp8d_i32x2 b, fp8d_f32x8 c) {
  return __builtin_amdgcn_wmma_f32_16x16x16_fp8_fp8_w32_gfx12(a, b, c);
}
#endif

// --- bf16 / f16 stores (no hip_bf16.h needed: the same bits on every toolchain) ---------------------
__device__ __forceinline__ unsigned short fp8d_f32_to_bf16_bits(float f) {
  const unsigned u = __builtin_bit_cast(unsigned, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // quiet NaN
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                 // round to nearest even
}
__device__ __forceinline__ float fp8d_bf16_bits_to_f32(unsigned short h) {
  return __builtin_bit_cast(float, (unsigned)h << 16);
}
// _Float16 is clang's native half on amdgcn: v_cvt_f16_f32 rounds to nearest even, v_cvt_f32_f16 is exact.
__device__ __forceinline__ unsigned short fp8d_f32_to_f16_bits(float f) {
  return __builtin_bit_cast(unsigned short, (_Float16)f);
}
__device__ __forceinline__ float fp8d_f16_bits_to_f32(unsigned short h) {
  return (float)__builtin_bit_cast(_Float16, h);
}

// act_quant_common.cuh: the vector reads and code writes of dynamic activation quantization, shared by the
// quantizer kernels (act_quant.cu) and the W8A8 GEMV that quantizes x itself (gemv_w8a8.cu, FP8D_CFG_FQ).
// The scale and rounding are fp8_common.cuh's fp8d_act_scale / fp8d_quant4: bit-identical to
// dispatch.quantize_activation wherever they run.
#pragma once
#include "fp8_common.cuh"

// The two 16-bit halves (bf16 or f16; x_kind is not f32) of a 32-bit word of x as f32: lo -> a, hi -> b.
__device__ __forceinline__ void fp8d_word_halves(unsigned wd, int x_kind, float& a, float& b) {
  const unsigned short lo = (unsigned short)(wd & 0xffffu), hi = (unsigned short)(wd >> 16);
  a = x_kind == FP8D_DTYPE_BF16 ? fp8d_bf16_bits_to_f32(lo) : fp8d_f16_bits_to_f32(lo);
  b = x_kind == FP8D_DTYPE_BF16 ? fp8d_bf16_bits_to_f32(hi) : fp8d_f16_bits_to_f32(hi);
}

// |h| max of the two 16-bit halves (bf16 or f16) or of one f32 word.
__device__ __forceinline__ float fp8d_word_absmax(unsigned wd, int x_kind, float amax) {
  if (x_kind == FP8D_DTYPE_F32) return fp8d_nanmax(amax, fabsf(__uint_as_float(wd)));
  float a, b;
  fp8d_word_halves(wd, x_kind, a, b);
  return fp8d_nanmax(fp8d_nanmax(amax, fabsf(a)), fabsf(b));
}

// |v| max over the 8 (bf16 / f16) or 4 (f32) values of a 16-byte vector of x.
__device__ __forceinline__ float fp8d_vec_absmax(const uint4& v, int x_kind, float amax) {
  amax = fp8d_word_absmax(v.x, x_kind, amax);
  amax = fp8d_word_absmax(v.y, x_kind, amax);
  amax = fp8d_word_absmax(v.z, x_kind, amax);
  return fp8d_word_absmax(v.w, x_kind, amax);
}

// The codes of the values of a 16-byte vector of x (vector index i, 16-byte aligned x) with scale s: 8 codes
// (one 8-byte store) for bf16 / f16, 4 (one 4-byte store) for f32. The same fp8d_quant4 as the scalar paths.
__device__ __forceinline__ void fp8d_quant_store_vec(const uint4& v, int x_kind, uint8_t* __restrict__ codes,
                                                     long long i, float s) {
  if (x_kind == FP8D_DTYPE_F32) {
    reinterpret_cast<unsigned*>(codes)[i] = fp8d_quant4(__uint_as_float(v.x), __uint_as_float(v.y),
                                                        __uint_as_float(v.z), __uint_as_float(v.w), s);
    return;
  }
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
  float f[8];
#pragma unroll
  for (int w = 0; w < 4; ++w) fp8d_word_halves(words[w], x_kind, f[2 * w], f[2 * w + 1]);
  reinterpret_cast<uint2*>(codes)[i] = make_uint2(fp8d_quant4(f[0], f[1], f[2], f[3], s),
                                                  fp8d_quant4(f[4], f[5], f[6], f[7], s));
}

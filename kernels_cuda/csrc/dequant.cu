// dequant.cu: W[N, K] e4m3 + scale -> bf16 / f16 [N, K] (the dequantize-then-cuBLAS route at large M).
// w = code (exact f32) * scale in f32, then one rounding: bit-identical to dispatch.dequantize(qw).to(dtype).
// Pure stream: 16 codes per thread (one 16-byte load, two 16-byte stores) when K % 16 == 0.
#include "fp8_common.cuh"

template <int SCALE>
__device__ __forceinline__ float fp8d_weight_scale(const void* scale, long long row, long long k, int K, int N) {
  if constexpr (SCALE == FP8D_SCALE_TENSOR) {
    return reinterpret_cast<const float*>(scale)[0];
  } else if constexpr (SCALE == FP8D_SCALE_ROW) {
    return reinterpret_cast<const float*>(scale)[row];
  } else if constexpr (SCALE == FP8D_SCALE_BLOCK) {
    const int kb = (K + FP8D_WEIGHT_BLOCK - 1) / FP8D_WEIGHT_BLOCK;
    return reinterpret_cast<const float*>(scale)[(row / FP8D_WEIGHT_BLOCK) * kb + k / FP8D_WEIGHT_BLOCK];
  } else {
    const int kg = (K + FP8D_MX_GROUP - 1) / FP8D_MX_GROUP;
    return fp8d_e8m0_to_f32(reinterpret_cast<const uint8_t*>(scale)[row * kg + k / FP8D_MX_GROUP]);
  }
}

__device__ __forceinline__ unsigned fp8d_pack2(float a, float b, int out_kind) {
  if (out_kind == FP8D_DTYPE_BF16) return (unsigned)fp8d_f32_to_bf16_bits(a) | ((unsigned)fp8d_f32_to_bf16_bits(b) << 16);
  return (unsigned)fp8d_f32_to_f16_bits(a) | ((unsigned)fp8d_f32_to_f16_bits(b) << 16);
}

template <int SCALE>
__device__ __forceinline__ void dequant_body(const uint8_t* __restrict__ w, const void* __restrict__ scale,
                                             void* __restrict__ out, int N, int K, int out_kind) {
  const long long total = (long long)N * K;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if ((K & 15) == 0) {
    const long long i0 = tid * 16;
    if (i0 >= total) return;
    const long long row = i0 / K, k = i0 % K;  // 16 codes never straddle a row, a block or an MX group
    const float sc = fp8d_weight_scale<SCALE>(scale, row, k, K, N);
    const uint4 c = fp8d_load128(w + i0);
    unsigned o[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float f[4];
      fp8d_decode4(fp8d_word(c, j), f);
      o[2 * j] = fp8d_pack2(f[0] * sc, f[1] * sc, out_kind);
      o[2 * j + 1] = fp8d_pack2(f[2] * sc, f[3] * sc, out_kind);
    }
    uint4* dst = reinterpret_cast<uint4*>(reinterpret_cast<uint16_t*>(out) + i0);
    dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
    dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
  } else {
    for (long long i = tid; i < total; i += (long long)gridDim.x * blockDim.x) {
      const long long row = i / K, k = i % K;
      const float v = fp8d_decode1(w[i]) * fp8d_weight_scale<SCALE>(scale, row, k, K, N);
      fp8d_store_from_f32(out, i, v, out_kind);
    }
  }
}

#ifndef FP8D_CFG_SCALE
#error "compile through kernels_cuda._launch (FP8D_CFG_SCALE selects the instantiation)"
#endif

extern "C" __global__ void __launch_bounds__(256) fp8d_dequant(const uint8_t* __restrict__ w, const void* __restrict__ scale,
                                                               void* __restrict__ out, int N, int K, int out_kind) {
  dequant_body<FP8D_CFG_SCALE>(w, scale, out, N, K, out_kind);
}

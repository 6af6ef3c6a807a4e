// scale_cols.cu: y[M, N] bf16 (row-major, in place) *= scale[n] (f32 [N]; one f32 when FP8D_CFG_PER_TENSOR), in
// f32 math with one rounding: the output epilogue of cuda.dequant_cublas for fp8_row / fp8_tensor with bf16 in and
// out (kernels_cuda/_dequant_route.py). A pure stream like dequant.cu: 8 outputs per thread (one 16-byte load and
// one 16-byte store) when N % 8 == 0, else a scalar grid-stride loop. torch's own y.mul_(scale) (bf16 times a
// broadcast f32 vector) reached about 20 % of the copy rate on the H200 (session 9).
#include "fp8_common.cuh"

#ifndef FP8D_CFG_PER_TENSOR
#error "compile through kernels_cuda._dequant_route (FP8D_CFG_PER_TENSOR selects the instantiation)"
#endif

__device__ __forceinline__ float fp8d_col_scale(const float* __restrict__ scale, long long n) {
  return FP8D_CFG_PER_TENSOR ? scale[0] : scale[n];
}

__device__ __forceinline__ unsigned fp8d_scale_bf16x2(unsigned w, float s_lo, float s_hi) {
  const float lo = fp8d_bf16_bits_to_f32((unsigned short)w) * s_lo;
  const float hi = fp8d_bf16_bits_to_f32((unsigned short)(w >> 16)) * s_hi;
  return (unsigned)fp8d_f32_to_bf16_bits(lo) | ((unsigned)fp8d_f32_to_bf16_bits(hi) << 16);
}

extern "C" __global__ void __launch_bounds__(256) fp8d_scale_cols(uint16_t* __restrict__ y,
                                                                  const float* __restrict__ scale, long long M, int N) {
  const long long total = M * N;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if ((N & 7) == 0) {
    const long long i0 = tid * 8;
    if (i0 >= total) return;
    const long long n0 = i0 % N;  // 8 outputs never straddle a row
    uint4* p = reinterpret_cast<uint4*>(y + i0);
    const uint4 v = *p;
    uint4 o;
    o.x = fp8d_scale_bf16x2(v.x, fp8d_col_scale(scale, n0 + 0), fp8d_col_scale(scale, n0 + 1));
    o.y = fp8d_scale_bf16x2(v.y, fp8d_col_scale(scale, n0 + 2), fp8d_col_scale(scale, n0 + 3));
    o.z = fp8d_scale_bf16x2(v.z, fp8d_col_scale(scale, n0 + 4), fp8d_col_scale(scale, n0 + 5));
    o.w = fp8d_scale_bf16x2(v.w, fp8d_col_scale(scale, n0 + 6), fp8d_col_scale(scale, n0 + 7));
    *p = o;
  } else {
    for (long long i = tid; i < total; i += (long long)gridDim.x * blockDim.x) {
      y[i] = fp8d_f32_to_bf16_bits(fp8d_bf16_bits_to_f32(y[i]) * fp8d_col_scale(scale, i % N));
    }
  }
}

// dequant.cu: W[N, K] e4m3 + scale -> bf16 / f16 [N, K] (the dequantize-then-cuBLAS route at large M).
// w = code (exact f32) * scale in f32, then one rounding: bit-identical to dispatch.dequantize(qw).to(dtype).
//
// Geometry when K % 8 == 0 (kernels_cuda._dequant.dequant_geometry): a 2-D grid, x along the 8-code chunks of a
// row, y (and z past 65535 rows) over rows, so a thread knows its row without a division; each thread makes one
// 8-byte load and one 16-byte streaming store. Why these (H200, session 17, tools/perf/probe_dequant.py, same-run
// against the copy kernel): 8 codes a thread instead of 16 reached >= 85 % of the copy rate in 14 of 32 cells
// against 6, and the streaming store (st.global.cs: the output is written once and read by the next kernel, not
// kept here) brought it to 21 of 32 (geomean 78 -> 86 %); 4 codes a thread, a persistent loop and a 2-D grid at 16
// codes were all slower. Other K: a scalar grid-stride loop.
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

// The raw scale of (row, k) (f32 bits, or the e8m0 byte) and its value, split so that the codes load is issued
// between them: nothing makes it wait for the scale. The e8m0 value is formed with selects, not
// fp8d_e8m0_to_f32's branches (a branch there made the codes load wait for the scale byte: mxfp8 ran 5 % slower
// than the other layouts at 8 codes a thread in the probe).
template <int SCALE>
__device__ __forceinline__ unsigned fp8d_scale_bits(const void* scale, unsigned row, unsigned k, unsigned K) {
  if constexpr (SCALE == FP8D_SCALE_TENSOR) {
    return reinterpret_cast<const unsigned*>(scale)[0];
  } else if constexpr (SCALE == FP8D_SCALE_ROW) {
    return reinterpret_cast<const unsigned*>(scale)[row];
  } else if constexpr (SCALE == FP8D_SCALE_BLOCK) {
    const unsigned kb = (K + FP8D_WEIGHT_BLOCK - 1) / FP8D_WEIGHT_BLOCK;
    return reinterpret_cast<const unsigned*>(scale)[(row / FP8D_WEIGHT_BLOCK) * kb + k / FP8D_WEIGHT_BLOCK];
  } else {
    const unsigned kg = (K + FP8D_MX_GROUP - 1) / FP8D_MX_GROUP;
    return reinterpret_cast<const uint8_t*>(scale)[(unsigned long long)row * kg + k / FP8D_MX_GROUP];
  }
}
template <int SCALE>
__device__ __forceinline__ float fp8d_scale_value(unsigned bits) {
  if constexpr (SCALE == FP8D_SCALE_MX) {  // = fp8d_e8m0_to_f32: 2^(c - 127); 0 -> 2^-127 (subnormal); 255 -> NaN
    unsigned v = bits << 23;
    v = bits == 0u ? 0x00400000u : v;
    v = bits == 0xffu ? 0x7fc00000u : v;
    return __uint_as_float(v);
  } else {
    return __uint_as_float(bits);
  }
}

__device__ __forceinline__ unsigned fp8d_pack2(float a, float b, int out_kind) {
  if (out_kind == FP8D_DTYPE_BF16) return (unsigned)fp8d_f32_to_bf16_bits(a) | ((unsigned)fp8d_f32_to_bf16_bits(b) << 16);
  return (unsigned)fp8d_f32_to_f16_bits(a) | ((unsigned)fp8d_f32_to_f16_bits(b) << 16);
}

__device__ __forceinline__ uint2 fp8d_load64_stream(const void* p) {
#if FP8D_IS_CUDA
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
  return r;
#else
  return *reinterpret_cast<const uint2*>(p);
#endif
}

__device__ __forceinline__ void fp8d_store128_stream(void* p, unsigned a, unsigned b, unsigned c, unsigned d) {
#if FP8D_IS_CUDA
  asm volatile("st.global.cs.v4.b32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
#else
  *reinterpret_cast<uint4*>(p) = make_uint4(a, b, c, d);
#endif
}

template <int SCALE>
__device__ __forceinline__ void dequant_body(const uint8_t* __restrict__ w, const void* __restrict__ scale,
                                             void* __restrict__ out, int N, int K, int out_kind) {
  if ((K & 7) == 0) {
    const unsigned row = (blockIdx.z * gridDim.y + blockIdx.y) * blockDim.y + threadIdx.y;
    const unsigned chunk = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= (unsigned)N || chunk >= ((unsigned)K >> 3)) return;
    const unsigned k = chunk << 3;  // 8 codes never straddle a row, a 128-block or an MX group
    const unsigned long long i0 = (unsigned long long)row * (unsigned)K + k;
    const unsigned sbits = fp8d_scale_bits<SCALE>(scale, row, k, (unsigned)K);
    const uint2 c = fp8d_load64_stream(w + i0);
    const float sc = fp8d_scale_value<SCALE>(sbits);
    unsigned o[4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float f[4];
      fp8d_decode4(j == 0 ? c.x : c.y, f);
      o[2 * j] = fp8d_pack2(f[0] * sc, f[1] * sc, out_kind);
      o[2 * j + 1] = fp8d_pack2(f[2] * sc, f[3] * sc, out_kind);
    }
    fp8d_store128_stream(reinterpret_cast<uint16_t*>(out) + i0, o[0], o[1], o[2], o[3]);
  } else {
    const long long total = (long long)N * K;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
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

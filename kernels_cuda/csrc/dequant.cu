// dequant.cu: W[N, K] e4m3 + scale -> bf16 / f16 [N, K] (the dequantize-then-cuBLAS route at large M).
// w = code (exact f32) * scale in f32, then one rounding: bit-identical to dispatch.dequantize(qw).to(dtype).
// Pure stream: chunks of 16 codes (one 16-byte load, two 16-byte stores) when K % 16 == 0.
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

// Row of chunk c (16 codes), for the layouts whose scale depends on it. cpr = K / 16 chunks per row; 32-bit
// division when every chunk index fits (the branch is uniform): a 64-bit one costs ~4x the instructions.
__device__ __forceinline__ long long fp8d_chunk_row(long long c, unsigned cpr, bool narrow) {
  return narrow ? (long long)((unsigned)c / cpr) : c / cpr;
}

// 16 codes of row `row` at column k -> 16 bf16/f16 values (two 16-byte stores at element i0).
template <int SCALE>
__device__ __forceinline__ void dequant16(const uint4 c, long long i0, long long row, long long k, const void* scale,
                                          void* out, int N, int K, int out_kind) {
  const float sc = fp8d_weight_scale<SCALE>(scale, row, k, K, N);
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
}

// K % 16 == 0: the weight is a stream of 16-code chunks (a chunk never straddles a row, a 128-block or an MX
// group). A CTA owns threads x CHUNKS consecutive chunks; each thread issues its CHUNKS 16-byte loads (blockDim
// chunks apart: every warp instruction reads 512 contiguous bytes) before it decodes any, so 16 x CHUNKS bytes are in
// flight per thread. Spreading a thread's chunks a whole grid apart instead measured 60-70 % of the copy rate on
// the H200 against 80-90 % for one chunk per thread (2026-11-29, session 7): keep each CTA's span contiguous.
template <int SCALE, int CHUNKS>
__device__ __forceinline__ void dequant_chunks(const uint8_t* __restrict__ w, const void* __restrict__ scale,
                                               void* __restrict__ out, int N, int K, int out_kind) {
  const unsigned cpr = (unsigned)K / 16u;
  const long long chunks = (long long)N * cpr;
  const long long stride = blockDim.x;
  const long long first = (long long)blockIdx.x * blockDim.x * CHUNKS + threadIdx.x;
#ifdef FP8D_DQ_FORCE_WIDE
  const bool narrow = false;  // tests: the 64-bit index path on a weight small enough to run
#else
  const bool narrow = chunks <= 0xffffffffLL;
#endif
  uint4 c[CHUNKS];
#pragma unroll
  for (int u = 0; u < CHUNKS; ++u) {
    const long long ci = first + u * stride;
    if (ci < chunks) c[u] = fp8d_load128(w + ci * 16);
  }
#pragma unroll
  for (int u = 0; u < CHUNKS; ++u) {
    const long long ci = first + u * stride;
    if (ci < chunks) {
      long long row = 0, k = 0;
      if constexpr (SCALE != FP8D_SCALE_TENSOR) {
        row = fp8d_chunk_row(ci, cpr, narrow);
        k = (ci - row * cpr) * 16;
      }
      dequant16<SCALE>(c[u], ci * 16, row, k, scale, out, N, K, out_kind);
    }
  }
}

// Any K: one element per thread and step, grid-stride (rows of codes are not 16-byte aligned).
template <int SCALE>
__device__ __forceinline__ void dequant_scalar(const uint8_t* __restrict__ w, const void* __restrict__ scale,
                                               void* __restrict__ out, int N, int K, int out_kind) {
  const long long total = (long long)N * K;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const long long row = i / K, k = i % K;
    const float v = fp8d_decode1(w[i]) * fp8d_weight_scale<SCALE>(scale, row, k, K, N);
    fp8d_store_from_f32(out, i, v, out_kind);
  }
}

#ifndef FP8D_CFG_SCALE
#error "compile through kernels_cuda._launch (FP8D_CFG_SCALE selects the instantiation)"
#endif
#ifndef FP8D_CFG_DQ_CHUNKS
#define FP8D_CFG_DQ_CHUNKS 4
#endif

// Geometry (kernels_cuda._launch.dequant_geometry): K % 16 == 0 -> ceil(N * K / 16 / (threads * CHUNKS)) CTAs;
// otherwise a grid-stride scalar loop.
extern "C" __global__ void __launch_bounds__(256) fp8d_dequant(const uint8_t* __restrict__ w, const void* __restrict__ scale,
                                                               void* __restrict__ out, int N, int K, int out_kind) {
  if ((K & 15) == 0) {
    dequant_chunks<FP8D_CFG_SCALE, FP8D_CFG_DQ_CHUNKS>(w, scale, out, N, K, out_kind);
  } else {
    dequant_scalar<FP8D_CFG_SCALE>(w, scale, out, N, K, out_kind);
  }
}

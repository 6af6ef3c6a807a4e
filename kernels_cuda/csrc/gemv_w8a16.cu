// gemv_w8a16.cu: y[M, N] = x[M, K] (bf16 | f16) @ dequant(W[N, K] e4m3, scale).T (+ bias), M <= 32.
//
// One kernel body for the four weight scale layouts (SCALE, a template parameter):
//   tensor / row : fp32 accumulate the raw code products, scale once in the epilogue
//   block        : accumulate each 128-wide K step separately, then acc += step * s[n/128, k/128]
//   mx           : the lane's 32-code chunk is one MX group: multiply its decoded weights by 2^e (exact
//                  in bf16 while the product stays a normal number, as in the fp32 reference)
// Weights are decoded to bf16 (or f16 for f16 activations) and multiplied on the tensor cores with fp32
// accumulation: at M = 16..32 the FP32 pipe would be slower than the memory stream.
// Instantiated through -D FP8D_CFG_* by kernels_cuda/_launch.py (one module per configuration).
#include "skinny_common.cuh"

template <int SCALE, int XKIND, int NT, int MT, int U>
__device__ __forceinline__ void w8a16_gemv_body(const uint8_t* __restrict__ w, const void* __restrict__ wscale,
                                                const uint16_t* __restrict__ x, const void* __restrict__ bias,
                                                void* __restrict__ y, int M, int N, int K, int bias_kind,
                                                int out_kind) {
  static_assert(!(SCALE == FP8D_SCALE_MX && XKIND == FP8D_DTYPE_F16), "MX exponents exceed the f16 range");
  constexpr int NSLOT = MT * NT * 4;
  extern __shared__ float fp8d_red[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * (16 * MT);
  const int nsteps = (K + FP8D_KSTEP - 1) / FP8D_KSTEP;
  const int kgroups = (K + FP8D_MX_GROUP - 1) / FP8D_MX_GROUP;
  const int nblk_n = (N + FP8D_WEIGHT_BLOCK - 1) / FP8D_WEIGHT_BLOCK;

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][nt][c] = 0.0f;

  for (int s0 = warp; s0 < nsteps; s0 += nwarps * U) {
    // All weight loads of U steps first: they are the DRAM stream, and issuing them together keeps
    // U * MT * 64 bytes per lane in flight.
    uint4 wv[U][MT][2][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int s = s0 + u * nwarps;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = n0 + mt * 16 + h * 8 + g;
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int kk = s * FP8D_KSTEP + t * FP8D_LANE_CHUNK + q * 16;
            wv[u][mt][h][q] = (s < nsteps && row < N && kk < K)
                                  ? fp8d_load128(w + (long long)row * K + kk)
                                  : make_uint4(0u, 0u, 0u, 0u);
          }
        }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int s = s0 + u * nwarps;
      if (s >= nsteps) break;  // warp-uniform
      const int kc = s * FP8D_KSTEP + t * FP8D_LANE_CHUNK;
      float part[MT][NT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) part[mt][nt][c] = 0.0f;

      unsigned mxs[MT][2];
      if constexpr (SCALE == FP8D_SCALE_MX) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = n0 + mt * 16 + h * 8 + g;
            const unsigned code = (row < N && kc < K)
                                      ? (unsigned)reinterpret_cast<const uint8_t*>(wscale)[(long long)row * kgroups + kc / FP8D_MX_GROUP]
                                      : (unsigned)FP8D_E8M0_BIAS;
            mxs[mt][h] = fp8d_e8m0_to_bf16x2(code);
          }
      }

#pragma unroll
      for (int q = 0; q < 2; ++q) {
        uint4 xv[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int tok = nt * 8 + g, kk = kc + q * 16;
          const bool ok = tok < M && kk < K;
          const uint16_t* px = x + (long long)tok * K + kk;
          xv[nt][0] = ok ? fp8d_load128_keep(px) : make_uint4(0u, 0u, 0u, 0u);
          xv[nt][1] = ok ? fp8d_load128_keep(px + 8) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int wd = 0; wd < 4; ++wd) {
          unsigned a[MT][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              unsigned lo, hi;
              if constexpr (XKIND == FP8D_DTYPE_F16) {
                fp8d_decode4_f16x2(fp8d_word(wv[u][mt][h][q], wd), lo, hi);
              } else {
                fp8d_decode4_bf16x2(fp8d_word(wv[u][mt][h][q], wd), lo, hi);
              }
              if constexpr (SCALE == FP8D_SCALE_MX) {
                lo = fp8d_bf16x2_fma(lo, mxs[mt][h], 0x80008000u);
                hi = fp8d_bf16x2_fma(hi, mxs[mt][h], 0x80008000u);
              }
              a[mt][h] = lo;      // a[0]: row g, a[1]: row g + 8 (lower K half)
              a[mt][2 + h] = hi;  // a[2], a[3]: upper K half
            }
          }
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const unsigned b[2] = {fp8d_word(xv[nt][wd >> 1], (wd & 1) * 2), fp8d_word(xv[nt][wd >> 1], (wd & 1) * 2 + 1)};
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              float(&d)[4] = (SCALE == FP8D_SCALE_BLOCK) ? part[mt][nt] : acc[mt][nt];
              if constexpr (XKIND == FP8D_DTYPE_F16) {
                fp8d_mma_f16_m16n8k16(d, a[mt], b);
              } else {
                fp8d_mma_bf16_m16n8k16(d, a[mt], b);
              }
            }
          }
        }
      }
      if constexpr (SCALE == FP8D_SCALE_BLOCK) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int nb = (n0 + mt * 16) / FP8D_WEIGHT_BLOCK;  // 16-row tiles never straddle a block
          const float sc = nb < nblk_n ? reinterpret_cast<const float*>(wscale)[(long long)nb * nsteps + s] : 0.0f;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[mt][nt][c] = fmaf(part[mt][nt][c], sc, acc[mt][nt][c]);
        }
      }
    }
  }

  fp8d_stage_partials<NSLOT>(fp8d_red, &acc[0][0][0]);
  for (int i = threadIdx.x; i < NSLOT * 32; i += blockDim.x) {
    const int f = i >> 5, ln = i & 31;
    int r, tok;
    fp8d_frag_coords(f, ln, NT, r, tok);
    const int row = n0 + r;
    if (row >= N || tok >= M) continue;
    float v = fp8d_reduce_slot<NSLOT>(fp8d_red, f, ln, nwarps);
    if constexpr (SCALE == FP8D_SCALE_TENSOR) v *= reinterpret_cast<const float*>(wscale)[0];
    if constexpr (SCALE == FP8D_SCALE_ROW) v *= reinterpret_cast<const float*>(wscale)[row];
    if (bias != nullptr) v += fp8d_load_as_f32(bias, row, bias_kind);
    fp8d_store_from_f32(y, (long long)tok * N + row, v, out_kind);
  }
}

#ifndef FP8D_CFG_SCALE
#error "compile through kernels_cuda._launch (FP8D_CFG_SCALE/XKIND/NT/MT/U select the instantiation)"
#endif

extern "C" __global__ void __launch_bounds__(256, 2) fp8d_w8a16_gemv(
    const uint8_t* __restrict__ w, const void* __restrict__ wscale, const uint16_t* __restrict__ x,
    const void* __restrict__ bias, void* __restrict__ y, int M, int N, int K, int bias_kind, int out_kind) {
  w8a16_gemv_body<FP8D_CFG_SCALE, FP8D_CFG_XKIND, FP8D_CFG_NT, FP8D_CFG_MT, FP8D_CFG_U>(
      w, wscale, x, bias, y, M, N, K, bias_kind, out_kind);
}

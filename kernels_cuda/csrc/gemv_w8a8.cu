// gemv_w8a8.cu: y[M, N] = (xq * xs) @ (W[N, K] e4m3 * ws).T (+ bias), M <= 32, with xq/xs from the fused
// activation quantization kernels (act_quant.cu). Three scale schemes (ACTQ, a template parameter):
//   tensor : per-tensor xs  x per-tensor ws  -> scale once in the epilogue
//   token  : per-token xs   x per-row ws     -> scale once in the epilogue
//   group  : 1x128 xs       x 128x128 ws     -> acc += (xq_g . wq_g) * xs[m, g] * ws[n/128, g] per K step
// sm_89+ multiplies the codes directly (mma m16n8k32 e4m3, no conversion at all); sm_80 decodes both sides
// to bf16 exactly and uses the bf16 MMA. Same lane/K mapping and reduction as gemv_w8a16.cu.
#include "skinny_common.cuh"

template <int ACTQ, int NT, int MT, int U>
__device__ __forceinline__ void w8a8_gemv_body(const uint8_t* __restrict__ w, const float* __restrict__ ws,
                                               const uint8_t* __restrict__ xq, const float* __restrict__ xs,
                                               const void* __restrict__ bias, void* __restrict__ y, int M, int N,
                                               int K, int bias_kind, int out_kind) {
  constexpr int NSLOT = MT * NT * 4;
  extern __shared__ float fp8d_red[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * (16 * MT);
  const int nsteps = (K + FP8D_KSTEP - 1) / FP8D_KSTEP;
  const int nblk_n = (N + FP8D_WEIGHT_BLOCK - 1) / FP8D_WEIGHT_BLOCK;

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][nt][c] = 0.0f;

  for (int s0 = warp; s0 < nsteps; s0 += nwarps * U) {
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

#pragma unroll
      for (int q = 0; q < 2; ++q) {
        uint4 xv[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int tok = nt * 8 + g, kk = kc + q * 16;
          xv[nt] = (tok < M && kk < K) ? fp8d_load128_keep(xq + (long long)tok * K + kk) : make_uint4(0u, 0u, 0u, 0u);
        }
#if FP8D_HAS_FP8_MMA
        // Two k32 MMAs per 16 codes: words (2i, 2i+1) are the lower / upper K halves of MMA i.
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const unsigned b[2] = {fp8d_word(xv[nt], 2 * i), fp8d_word(xv[nt], 2 * i + 1)};
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              const unsigned a[4] = {fp8d_word(wv[u][mt][0][q], 2 * i), fp8d_word(wv[u][mt][1][q], 2 * i),
                                     fp8d_word(wv[u][mt][0][q], 2 * i + 1), fp8d_word(wv[u][mt][1][q], 2 * i + 1)};
              fp8d_mma_e4m3_m16n8k32(part[mt][nt], a, b);
            }
          }
        }
#else
        // No fp8 MMA: decode both operands to bf16 (exact) and use one k16 MMA per 4 codes.
#pragma unroll
        for (int wd = 0; wd < 4; ++wd) {
          unsigned a[MT][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) fp8d_decode4_bf16x2(fp8d_word(wv[u][mt][h][q], wd), a[mt][h], a[mt][2 + h]);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            unsigned b[2];
            fp8d_decode4_bf16x2(fp8d_word(xv[nt], wd), b[0], b[1]);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
              fp8d_mma_bf16_m16n8k16(part[mt][nt], a[mt], b);
          }
        }
#endif
      }
      if constexpr (ACTQ == FP8D_ACTQ_GROUP) {
        float xsv[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int tok = nt * 8 + 2 * t + j;
            xsv[nt][j] = tok < M ? xs[(long long)tok * nsteps + s] : 0.0f;
          }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int nb = (n0 + mt * 16) / FP8D_WEIGHT_BLOCK;
          const float wsc = nb < nblk_n ? ws[(long long)nb * nsteps + s] : 0.0f;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[mt][nt][c] = fmaf(part[mt][nt][c] * xsv[nt][c & 1], wsc, acc[mt][nt][c]);
        }
      } else {
        // tensor / token: the scales are per output, applied once in the epilogue; the step's code-space
        // sum joins the fp32 accumulator here (one FADD per fragment value), so no MMA accumulator chain
        // runs longer than one 128-wide step: the same MMA usage as the group path.
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[mt][nt][c] += part[mt][nt][c];
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
    if constexpr (ACTQ == FP8D_ACTQ_TENSOR) v *= xs[0] * ws[0];
    if constexpr (ACTQ == FP8D_ACTQ_TOKEN) v *= xs[tok] * ws[row];
    if (bias != nullptr) v += fp8d_load_as_f32(bias, row, bias_kind);
    fp8d_store_from_f32(y, (long long)tok * N + row, v, out_kind);
  }
}

#ifndef FP8D_CFG_ACTQ
#error "compile through kernels_cuda._launch (FP8D_CFG_ACTQ/NT/MT/U select the instantiation)"
#endif

extern "C" __global__ void __launch_bounds__(256, 2) fp8d_w8a8_gemv(
    const uint8_t* __restrict__ w, const float* __restrict__ ws, const uint8_t* __restrict__ xq,
    const float* __restrict__ xs, const void* __restrict__ bias, void* __restrict__ y, int M, int N, int K,
    int bias_kind, int out_kind) {
  w8a8_gemv_body<FP8D_CFG_ACTQ, FP8D_CFG_NT, FP8D_CFG_MT, FP8D_CFG_U>(w, ws, xq, xs, bias, y, M, N, K, bias_kind,
                                                                       out_kind);
}

// gemv_w8a8.cu: y[M, N] = (xq * xs) @ (W[N, K] e4m3 * ws).T (+ bias), M <= 32, with xq/xs from the fused
// activation quantization kernels (act_quant.cu). Three scale schemes (ACTQ, a template parameter):
//   tensor : per-tensor xs  x per-tensor ws  -> scale once in the epilogue
//   token  : per-token xs   x per-row ws     -> scale once in the epilogue
//   group  : 1x128 xs       x 128x128 ws     -> acc += (xq_g . wq_g) * xs[m, g] * ws[n/128, g] per K step
// sm_89+ multiplies the codes directly (mma m16n8k32 e4m3, no conversion at all); sm_80 decodes both sides
// to bf16 exactly and uses the bf16 MMA. The loop, reduction and epilogue are skinny_common.cuh's.
#include "skinny_common.cuh"

template <int ACTQ, int NT_, int MT_, int DEPTH_>
struct W8A8Gemv {
  static constexpr int MT = MT_, NT = NT_, DEPTH = DEPTH_;
  // Every step accumulates into `part` (also tensor / token, whose scales wait for the epilogue): no MMA
  // accumulator chain runs longer than one 128-wide step, the same MMA usage as the group path.
  static constexpr bool kPartial = true;
  static constexpr bool kUniformScale = ACTQ == FP8D_ACTQ_TENSOR;
  static constexpr bool kRowScale = ACTQ == FP8D_ACTQ_TOKEN;
  static constexpr bool kTokScale = ACTQ == FP8D_ACTQ_TOKEN;
  static constexpr bool kHasRare = false;  // one policy for every input (no Rare, rare(), cta_needs_rare())

  struct Half {
    uint4 x[NT];  // [token tile]: this lane's 16 codes of chunk q
  };
  static constexpr int kHalfRegs = 4 * NT;
  struct Scales {
    float xsc[NT][2];  // group: x scale of tokens 2t, 2t + 1 of each token tile
    float wsc[MT];     // group: weight block scale per row tile
  };
  static constexpr int kScaleRegs = ACTQ == FP8D_ACTQ_GROUP ? 2 * NT + MT : 0;

  const float* __restrict__ ws;
  const float* __restrict__ xs;
  int M, N, K;
  const uint8_t* __restrict__ xq;

  __device__ __forceinline__ void load_half(Half& h, int, Fp8dLane L, int s, int q) const {
    const int kk = s * FP8D_KSTEP + fp8d_chunk_k(L.t, q);  // K % 16 == 0: a chunk is all in or all out
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int tok = nt * 8 + L.g;
      h.x[nt] = (tok < M && kk < K) ? fp8d_load128_keep(xq + (long long)tok * K + kk) : make_uint4(0u, 0u, 0u, 0u);
    }
  }

  __device__ __forceinline__ void load_scales(Scales& sc, int n0, Fp8dLane L, int s) const {
    if constexpr (ACTQ == FP8D_ACTQ_GROUP) {
      const int nsteps = (K + FP8D_KSTEP - 1) / FP8D_KSTEP, nblk_n = (N + FP8D_WEIGHT_BLOCK - 1) / FP8D_WEIGHT_BLOCK;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int tok = nt * 8 + 2 * L.t + j;
          sc.xsc[nt][j] = tok < M ? xs[(long long)tok * nsteps + s] : 0.0f;
        }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int nb = (n0 + mt * 16) / FP8D_WEIGHT_BLOCK;
        sc.wsc[mt] = nb < nblk_n ? ws[(long long)nb * nsteps + s] : 0.0f;
      }
    }
  }

  __device__ __forceinline__ void half_mma(float (&d)[MT][NT][4], const Fp8dWeightStep<MT>& wt, const Half& h,
                                           int q) const {
#if FP8D_HAS_FP8_MMA
    // Two k32 MMAs per 16 codes: words (2i, 2i+1) are the lower / upper K halves of MMA i.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const unsigned b[2] = {fp8d_word(h.x[nt], 2 * i), fp8d_word(h.x[nt], 2 * i + 1)};
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const unsigned a[4] = {fp8d_word(wt.v[mt][0][q], 2 * i), fp8d_word(wt.v[mt][1][q], 2 * i),
                                 fp8d_word(wt.v[mt][0][q], 2 * i + 1), fp8d_word(wt.v[mt][1][q], 2 * i + 1)};
          fp8d_mma_e4m3_m16n8k32(d[mt][nt], a, b);
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
        for (int hh = 0; hh < 2; ++hh) fp8d_decode4_bf16x2_fast(fp8d_word(wt.v[mt][hh][q], wd), a[mt][hh], a[mt][2 + hh]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        unsigned b[2];
        fp8d_decode4_bf16x2_fast(fp8d_word(h.x[nt], wd), b[0], b[1]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) fp8d_mma_bf16_m16n8k16(d[mt][nt], a[mt], b);
      }
    }
#endif
  }

  __device__ __forceinline__ void finish(float (&acc)[MT][NT][4], const float (&part)[MT][NT][4],
                                         const Scales& sc) const {
    if constexpr (ACTQ == FP8D_ACTQ_GROUP) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c)
            acc[mt][nt][c] = fmaf(part[mt][nt][c] * sc.xsc[nt][c & 1], sc.wsc[mt], acc[mt][nt][c]);
    } else {
      // tensor / token: the step's code-space sum joins the fp32 accumulator (one FADD per fragment value).
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[mt][nt][c] += part[mt][nt][c];
    }
  }

  __device__ __forceinline__ float uniform_scale() const { return xs[0] * ws[0]; }
  __device__ __forceinline__ float row_scale(int row) const { return ws[row]; }
  __device__ __forceinline__ float tok_scale(int tok) const { return xs[tok]; }
};

#ifndef FP8D_CFG_ACTQ
#error "compile through kernels_cuda._launch (FP8D_CFG_ACTQ/NT/MT/U select the instantiation)"
#endif

// FP8D_CFG_U: K steps of weight loads each warp keeps in flight (GemvConfig.unroll).
extern "C" __global__ void __launch_bounds__(256, 2) fp8d_w8a8_gemv(
    const uint8_t* __restrict__ w, const float* __restrict__ ws, const uint8_t* __restrict__ xq,
    const float* __restrict__ xs, const void* __restrict__ bias, void* __restrict__ y, int M, int N, int K,
    int bias_kind, int out_kind) {
  const W8A8Gemv<FP8D_CFG_ACTQ, FP8D_CFG_NT, FP8D_CFG_MT, FP8D_CFG_U> p{ws, xs, M, N, K, xq};
  fp8d_skinny_gemv(p, w, bias, y, M, N, K, bias_kind, out_kind);
}

// gemv_w8a8.cu: y[M, N] = (xq * xs) @ (W[N, K] e4m3 * ws).T (+ bias), M <= 32, with xq/xs from the fused
// activation quantization kernels (act_quant.cu). Three scale schemes (ACTQ, a template parameter):
//   tensor : per-tensor xs  x per-tensor ws  -> scale once in the epilogue
//   token  : per-token xs   x per-row ws     -> scale once in the epilogue
//   group  : 1x128 xs       x 128x128 ws     -> acc += (xq_g . wq_g) * xs[m, g] * ws[n/128, g] per K step
// Quantization inside the GEMV (FUSEQ = x's bf16 / f16 dtype code + 1; tensor and token only; M x K <= the
// launcher's limit): after its weight loads are in flight and the previous grid is done, every CTA computes the
// amax of x (per token or per tensor), the scales, and the codes of all of x into its shared memory, with
// act_quant.cu's arithmetic (fp8d_act_scale, fp8d_quant4: IEEE division, clamp, RNE); the loop then reads the
// codes from shared memory instead of act_quant's output. The codes and scales are dispatch.quantize_activation's
// (a max is exact and order-free), so the output is bit-identical to the two-launch path, and the quantizer's
// launch and grid boundary leave the decode chain. Quantizing x once per CTA, not per lane in the loop: a first
// version did it per lane just before the MMAs and ran 2-5x slower (each x value quantized by every warp that
// reads it, zero rows of padded tokens through the division's slow path).
// sm_89+ multiplies the codes directly (mma m16n8k32 e4m3, no conversion at all); sm_80 decodes both sides
// to bf16 exactly and uses the bf16 MMA. The loop, reduction and epilogue are skinny_common.cuh's.
#include "skinny_common.cuh"

template <int ACTQ, int NT_, int MT_, int DEPTH_, int FUSEQ = 0>
struct W8A8Gemv {
  static_assert(FUSEQ == 0 || ACTQ != FP8D_ACTQ_GROUP, "group scales come from the act_quant kernel");
  static constexpr int MT = MT_, NT = NT_, DEPTH = DEPTH_;
  static constexpr int kXKind = FUSEQ - 1;  // fused: FP8D_DTYPE_BF16 / F16 of x
  // Every step accumulates into `part` (also tensor / token, whose scales wait for the epilogue): no MMA
  // accumulator chain runs longer than one 128-wide step, the same MMA usage as the group path.
  static constexpr bool kPartial = true;
  static constexpr bool kUniformScale = ACTQ == FP8D_ACTQ_TENSOR;
  static constexpr bool kRowScale = ACTQ == FP8D_ACTQ_TOKEN;
  static constexpr bool kTokScale = ACTQ == FP8D_ACTQ_TOKEN;
  static constexpr bool kHasRare = false;  // one policy for every input (the driver never asks for Rare)
  static constexpr int kPrologueSteps = FUSEQ ? 3 : 0;

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
  const float* __restrict__ xs;   // act_quant's scales; fused: the shared-memory scales (prologue)
  int M, N, K;
  const uint8_t* __restrict__ xq;  // act_quant's codes [M, K]; fused: the shared-memory codes (prologue)
  const void* __restrict__ x;      // fused: x [M, K] itself (16-byte aligned rows: K % 16 == 0)

  __device__ __forceinline__ void load_half(Half& h, int, Fp8dLane L, int s, int q) const {
    const int kk = s * FP8D_KSTEP + fp8d_chunk_k(L.t, q);  // K % 16 == 0: a chunk is all in or all out
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int tok = nt * 8 + L.g;
      const bool ok = tok < M && kk < K;
      if constexpr (FUSEQ != 0) {
        h.x[nt] = ok ? *reinterpret_cast<const uint4*>(xq + tok * K + kk) : make_uint4(0u, 0u, 0u, 0u);
      } else {
        h.x[nt] = ok ? fp8d_load128_keep(xq + (long long)tok * K + kk) : make_uint4(0u, 0u, 0u, 0u);
      }
    }
  }

  // Fused quantization, three steps with a CTA barrier after each (every thread, after the wait for the previous
  // grid). 0: each warp's amax of every token's row of x into scratch[warp][token] (nwarps x 8 NT floats);
  // 1: the scales into xs (32 floats; per tensor all equal; tokens >= M get 1); 2: the codes of x into xq.
  __device__ __forceinline__ void prologue(int step, float* scratch) const {
    if constexpr (FUSEQ != 0) {
      constexpr int TOK = 8 * NT;
      const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
      const int vec_per_row = K / 8;  // 16-byte vectors of 8 values
      const uint4* xv = reinterpret_cast<const uint4*>(x);
      if (step == 0) {
        float amax[TOK];
#pragma unroll
        for (int m = 0; m < TOK; ++m) {
          amax[m] = 0.0f;
          if (m < M) {
#pragma unroll 4
            for (int i = threadIdx.x; i < vec_per_row; i += blockDim.x) {
              const uint4 v = fp8d_load128_keep(xv + m * vec_per_row + i);
              amax[m] = fp8d_word_absmax(v.x, kXKind, amax[m]);
              amax[m] = fp8d_word_absmax(v.y, kXKind, amax[m]);
              amax[m] = fp8d_word_absmax(v.z, kXKind, amax[m]);
              amax[m] = fp8d_word_absmax(v.w, kXKind, amax[m]);
            }
          }
        }
#pragma unroll
        for (int m = 0; m < TOK; ++m) {
          const float r = fp8d_warp_max(amax[m]);
          if (lane == 0) scratch[warp * TOK + m] = r;
        }
      } else if (step == 1) {
        if (threadIdx.x < 32) {
          const int m = threadIdx.x;  // per token: token m; per tensor: every lane computes the one scale
          float a = 0.0f;
          for (int wp = 0; wp < nwarps; ++wp) {
            if constexpr (ACTQ == FP8D_ACTQ_TENSOR) {
              for (int t = 0; t < TOK; ++t) a = fp8d_nanmax(a, scratch[wp * TOK + t]);
            } else if (m < TOK) {
              a = fp8d_nanmax(a, scratch[wp * TOK + m]);
            }
          }
          const_cast<float*>(xs)[m] = (ACTQ == FP8D_ACTQ_TENSOR || m < M) ? fp8d_act_scale(a) : 1.0f;
        }
      } else {
        uint2* codes = reinterpret_cast<uint2*>(const_cast<uint8_t*>(xq));
        for (int i = threadIdx.x; i < M * vec_per_row; i += blockDim.x) {
          const uint4 v = fp8d_load128_keep(xv + i);  // L1/L2 hit: step 0 read it
          const float s = xs[ACTQ == FP8D_ACTQ_TENSOR ? 0 : i / vec_per_row];
          float f[8];
#pragma unroll
          for (int w = 0; w < 4; ++w) fp8d_half2_to_f32(fp8d_word(v, w), kXKind, f[2 * w], f[2 * w + 1]);
          codes[i] = make_uint2(fp8d_quant4(f[0], f[1], f[2], f[3], s), fp8d_quant4(f[4], f[5], f[6], f[7], s));
        }
      }
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
#ifndef FP8D_CFG_FUSEQ
#define FP8D_CFG_FUSEQ 0  // codes and scales from act_quant.cu; the launcher passes 1 / 2 for a fused bf16 / f16 x
#endif

// FP8D_CFG_U: K steps of weight loads each warp keeps in flight (GemvConfig.unroll).
// Fused (FP8D_CFG_FUSEQ): xq is x itself and xs is unused; the codes and scales live in shared memory
// (fp8d_prologue_smem: 32 scales, then M x K codes).
extern "C" __global__ void __launch_bounds__(256, 2) fp8d_w8a8_gemv(
    const uint8_t* __restrict__ w, const float* __restrict__ ws, const uint8_t* __restrict__ xq,
    const float* __restrict__ xs, const void* __restrict__ bias, void* __restrict__ y, int M, int N, int K,
    int bias_kind, int out_kind) {
  float* const sm = fp8d_prologue_smem();
  const W8A8Gemv<FP8D_CFG_ACTQ, FP8D_CFG_NT, FP8D_CFG_MT, FP8D_CFG_U, FP8D_CFG_FUSEQ> p =
      FP8D_CFG_FUSEQ ? W8A8Gemv<FP8D_CFG_ACTQ, FP8D_CFG_NT, FP8D_CFG_MT, FP8D_CFG_U, FP8D_CFG_FUSEQ>{
                           ws, sm, M, N, K, reinterpret_cast<const uint8_t*>(sm + 32), xq}
                     : W8A8Gemv<FP8D_CFG_ACTQ, FP8D_CFG_NT, FP8D_CFG_MT, FP8D_CFG_U, FP8D_CFG_FUSEQ>{
                           ws, xs, M, N, K, xq, nullptr};
  // the driver's shared memory follows the fused prologue's 32 scales and M x K codes (16-byte multiple)
  fp8d_skinny_gemv(p, w, bias, y, M, N, K, bias_kind, out_kind, FP8D_CFG_FUSEQ ? 32 + (M * K + 15) / 16 * 4 : 0);
}

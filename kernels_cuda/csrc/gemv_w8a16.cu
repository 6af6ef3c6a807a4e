// gemv_w8a16.cu: y[M, N] = x[M, K] (bf16 | f16) @ dequant(W[N, K] e4m3, scale).T (+ bias), M <= 32.
//
// One policy for the four weight scale layouts (SCALE, a template parameter):
//   tensor / row : fp32 accumulate the raw code products, scale once in the epilogue
//   block        : accumulate each 128-wide K step separately, then acc += step * s[n/128, k/128]
//   mx           : a lane chunk of 16 codes lies in one 32-wide MX group: its decoded weights are value x 2^e,
//                  the 2^e folded into the decode's one fma (exact in bf16 while the product stays a normal
//                  number, as in the fp32 reference)
// Weights are decoded to bf16 (or f16 for f16 activations) and multiplied on the tensor cores with fp32
// accumulation: at M = 16..32 the FP32 pipe would be slower than the memory stream. The loop, reduction
// and epilogue are skinny_common.cuh's. Instantiated through -D FP8D_CFG_* by kernels_cuda/_launch.py
// (one module per configuration).
#include "skinny_common.cuh"

// The per-step operands, shared by a policy and its Rare variant (the driver hands one set of registers to
// whichever runs the loop).
template <int NT, int MT>
struct W8A16Operands {
  struct Half {
    uint4 x[NT][2];      // [token tile][8-value half]: this lane's 16 x values of chunk q
    unsigned mx[MT][2];  // mxfp8: e8m0 code of the chunk's group per (row tile, h)
  };
  struct Scales {
    float bs[MT];  // fp8_block: the step's block scale per row tile
  };
};

#ifndef FP8D_CFG_PERSIST
#define FP8D_CFG_PERSIST 0
#endif
#ifndef FP8D_CFG_TILED
#define FP8D_CFG_TILED 0
#endif

template <int SCALE, int XKIND, int NT_, int MT_, int DEPTH_, bool kMxRest = false>
struct W8A16Gemv {
  static_assert(!(SCALE == FP8D_SCALE_MX && XKIND == FP8D_DTYPE_F16), "MX exponents exceed the f16 range");
  static constexpr int MT = MT_, NT = NT_, DEPTH = DEPTH_;
  // mxfp8: the group's 2^e rides on the decode's restoring fma (fp8d_mx_decode_mul). A CTA whose rows hold a
  // scale code above FP8D_MX_FOLD_MAX (never in real checkpoints) runs the Rare policy, which multiplies once
  // more by fp8d_mx_rest_mul.
  static constexpr bool kHasRare = SCALE == FP8D_SCALE_MX && !kMxRest;
  using Rare = W8A16Gemv<SCALE, XKIND, NT_, MT_, DEPTH_, true>;
  static constexpr bool kPartial = SCALE == FP8D_SCALE_BLOCK;
#if FP8D_CFG_TILED
  // The weight's decode tiles (kernels_cuda/_tiles.py): skinny_common.cuh's tiled layout. Declared only when asked
  // for, as kPersistent below.
  static constexpr bool kTiledWeights = true;
#endif
#if FP8D_CFG_PERSIST
  // An experiment (tools/perf/probe_persistent_gemv.py; no launcher sizes such a grid yet): a grid of the resident
  // CTAs walking several row tiles each. Not with mxfp8's per-CTA Rare policy. Declared only when asked for: the
  // member alone changes the other modules' images (NVRTC 13.0), which tools.restamp_table --images-equal checks.
  static constexpr bool kPersistent = true;
#endif
  static constexpr bool kUniformScale = SCALE == FP8D_SCALE_TENSOR;
  static constexpr bool kRowScale = SCALE == FP8D_SCALE_ROW;
  static constexpr bool kTokScale = false;

  using Half = typename W8A16Operands<NT_, MT_>::Half;
  static constexpr int kHalfRegs = 8 * NT + (SCALE == FP8D_SCALE_MX ? 2 * MT : 0);
  using Scales = typename W8A16Operands<NT_, MT_>::Scales;
  static constexpr int kScaleRegs = kPartial ? MT : 0;

  const void* __restrict__ wscale;
  const uint16_t* __restrict__ x;
  int M, N, K;

  __device__ __forceinline__ void load_half(Half& h, int n0, Fp8dLane L, int s, int q) const {
    const int kk = s * FP8D_KSTEP + fp8d_chunk_k(L.t, q);  // K % 16 == 0: a chunk is all in or all out
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int tok = nt * 8 + L.g;
      const bool ok = tok < M && kk < K;
      const uint16_t* px = x + (long long)tok * K + kk;
      h.x[nt][0] = ok ? fp8d_load128_keep(px) : make_uint4(0u, 0u, 0u, 0u);
      h.x[nt][1] = ok ? fp8d_load128_keep(px + 8) : make_uint4(0u, 0u, 0u, 0u);
    }
    if constexpr (SCALE == FP8D_SCALE_MX) {
      // Clamped, not predicated (session 31, with the folded multiplier below: 0.876-1.012x the time, median 0.988): a
      // row past N is never stored, and a chunk past K (zero codes) takes the row's last group, which K covers, so a
      // NaN code there makes the row NaN either way; the clamped codes are among those cta_needs_rare scanned. On
      // decode tiles only the row is clamped: the group's clamp spilled 16 bytes there at two configs (NVRTC 13.0).
      const int kgroups = (K + FP8D_MX_GROUP - 1) / FP8D_MX_GROUP;
      const int grp = FP8D_CFG_TILED ? kk / FP8D_MX_GROUP : min(kk / FP8D_MX_GROUP, kgroups - 1);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int row = min(n0 + mt * 16 + hh * 8 + L.g, N - 1);
          const uint8_t* code = reinterpret_cast<const uint8_t*>(wscale) + (long long)row * kgroups + grp;
          h.mx[mt][hh] = FP8D_CFG_TILED && kk >= K ? (unsigned)FP8D_E8M0_BIAS : (unsigned)*code;
        }
    }
  }

  __device__ __forceinline__ void load_scales(Scales& sc, int n0, Fp8dLane, int s) const {
    const int nsteps = (K + FP8D_KSTEP - 1) / FP8D_KSTEP, nblk_n = (N + FP8D_WEIGHT_BLOCK - 1) / FP8D_WEIGHT_BLOCK;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int nb = (n0 + mt * 16) / FP8D_WEIGHT_BLOCK;  // 16-row tiles never straddle a block
      sc.bs[mt] = nb < nblk_n ? reinterpret_cast<const float*>(wscale)[(long long)nb * nsteps + s] : 0.0f;
    }
  }

  __device__ __forceinline__ Rare rare() const { return Rare{wscale, x, M, N, K}; }

  // Any MX code of this CTA's rows above FP8D_MX_FOLD_MAX (the NaN code 255 counts: both policies give NaN)?
  // The rows' codes are one contiguous byte range (16-byte aligned: n0 is a multiple of 16 and the launcher
  // passes an aligned scale tensor), read with 16-byte loads, four per thread in flight at a time.
  __device__ __forceinline__ bool cta_needs_rare(int n0) const {
    const uint8_t* sc = reinterpret_cast<const uint8_t*>(wscale);
    const long long kgroups = (K + FP8D_MX_GROUP - 1) / FP8D_MX_GROUP;
    const long long b0 = n0 * kgroups, b1 = (n0 + 16 * MT < N ? n0 + 16 * MT : N) * kgroups;
    unsigned hit = 0;
    for (long long c0 = b0 + 16ll * threadIdx.x; c0 < b1; c0 += 64ll * blockDim.x) {
      uint4 v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const long long c = c0 + 16ll * j * blockDim.x;
        v[j] = c + 16 <= b1 ? fp8d_load128_keep(sc + c) : make_uint4(0u, 0u, 0u, 0u);
        if (c < b1 && c + 16 > b1)
          for (long long i = c; i < b1; ++i) hit |= sc[i] > FP8D_MX_FOLD_MAX;  // the range's last bytes
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int wd = 0; wd < 4; ++wd) {
          // a byte >= 135 = 0x87: bit 7 set and its low 7 bits >= 7 (adding 0x79 to <= 0x7f never carries out)
          const unsigned u = fp8d_word(v[j], wd);
          hit |= ((u & 0x7f7f7f7fu) + 0x79797979u) & u & 0x80808080u;
        }
    }
    return fp8d_cta_any(hit != 0);
  }

  // Half step q: 4 words of 4 codes per row; word wd pairs with x values 4 wd .. 4 wd + 3 of the chunk.
  __device__ __forceinline__ void half_mma(float (&d)[MT][NT][4], const Fp8dWeightStep<MT>& wt, const Half& h,
                                           int q) const {
    unsigned mul[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        // 2^(c - 7) for MX (the main policy never sees a code above FP8D_MX_FOLD_MAX: cta_needs_rare), else 2^120
        mul[mt][hh] = SCALE != FP8D_SCALE_MX ? 0x7b807b80u
                      : kMxRest              ? fp8d_mx_decode_mul(h.mx[mt][hh])
                                             : fp8d_mx_folded_mul(h.mx[mt][hh]);
#pragma unroll
    for (int wd = 0; wd < 4; ++wd) {
      unsigned a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          unsigned lo, hi;
          if constexpr (XKIND == FP8D_DTYPE_F16) {
            fp8d_decode4_f16x2_fast(fp8d_word(wt.v[mt][hh][q], wd), lo, hi);
          } else {
            fp8d_decode4_bf16x2_fast(fp8d_word(wt.v[mt][hh][q], wd), lo, hi, mul[mt][hh]);
          }
          if constexpr (kMxRest) {
            const unsigned r = fp8d_mx_rest_mul(h.mx[mt][hh]);
            lo = fp8d_bf16x2_fma(lo, r, 0x80008000u);
            hi = fp8d_bf16x2_fma(hi, r, 0x80008000u);
          }
          a[mt][hh] = lo;      // a[0]: row g, a[1]: row g + 8 (lower K half)
          a[mt][2 + hh] = hi;  // a[2], a[3]: upper K half
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const unsigned b[2] = {fp8d_word(h.x[nt][wd >> 1], (wd & 1) * 2), fp8d_word(h.x[nt][wd >> 1], (wd & 1) * 2 + 1)};
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (XKIND == FP8D_DTYPE_F16) {
            fp8d_mma_f16_m16n8k16(d[mt][nt], a[mt], b);
          } else {
            fp8d_mma_bf16_m16n8k16(d[mt][nt], a[mt], b);
          }
        }
      }
    }
  }

  // fp8_block: acc += (the step's code-space sum) * s[n/128, k/128].
  __device__ __forceinline__ void finish(float (&acc)[MT][NT][4], const float (&part)[MT][NT][4],
                                         const Scales& sc) const {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[mt][nt][c] = fmaf(part[mt][nt][c], sc.bs[mt], acc[mt][nt][c]);
  }

  __device__ __forceinline__ float uniform_scale() const { return reinterpret_cast<const float*>(wscale)[0]; }
  __device__ __forceinline__ float row_scale(int row) const { return reinterpret_cast<const float*>(wscale)[row]; }
  __device__ __forceinline__ float tok_scale(int) const { return 1.0f; }
};

#ifndef FP8D_CFG_SCALE
#error "compile through kernels_cuda._launch (FP8D_CFG_SCALE/XKIND/NT/MT/U select the instantiation)"
#endif

// FP8D_CFG_U: K steps of weight loads each warp keeps in flight (GemvConfig.unroll).
extern "C" __global__ void __launch_bounds__(256, 2) fp8d_w8a16_gemv(
    const uint8_t* __restrict__ w, const void* __restrict__ wscale, const uint16_t* __restrict__ x,
    const void* __restrict__ bias, void* __restrict__ y, int M, int N, int K, int bias_kind, int out_kind) {
  const W8A16Gemv<FP8D_CFG_SCALE, FP8D_CFG_XKIND, FP8D_CFG_NT, FP8D_CFG_MT, FP8D_CFG_U> p{wscale, x, M, N, K};
  fp8d_skinny_gemv(p, w, bias, y, M, N, K, bias_kind, out_kind);
}

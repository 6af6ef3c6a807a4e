// gemv_w8a8.cu: y[M, N] = (xq * xs) @ (W[N, K] e4m3 * ws).T (+ bias), M <= 32, with xq/xs from the fused
// activation quantization kernels (act_quant.cu). Three scale schemes (ACTQ, a template parameter):
//   tensor : per-tensor xs  x per-tensor ws  -> scale once in the epilogue
//   token  : per-token xs   x per-row ws     -> scale once in the epilogue
//   group  : 1x128 xs       x 128x128 ws     -> acc += (xq_g . wq_g) * xs[m, g] * ws[n/128, g] per K step
// sm_89+ multiplies the codes directly (mma m16n8k32 e4m3, no conversion at all); sm_80 decodes both sides
// to bf16 exactly and uses the bf16 MMA. The loop, reduction and epilogue are skinny_common.cuh's.
//
// With -DFP8D_CFG_FQ=1 the module holds fp8d_w8a8_gemv_fq instead (at the end of this file): the same GEMV in ONE
// launch, each CTA quantizing x itself; with -DFP8D_CFG_INLINE=1 as well, fp8d_w8a8_gemv_inline: one launch whose
// warps quantize each K step of x in registers right before its MMAs.
#include "skinny_common.cuh"

#ifndef FP8D_CFG_TILED
#define FP8D_CFG_TILED 0
#endif

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
#if FP8D_CFG_TILED
  // The weight's decode tiles (kernels_cuda/_tiles.py): skinny_common.cuh's tiled layout. Declared only when asked
  // for: the member alone would change the other modules' images.
  static constexpr bool kTiledWeights = true;
#endif

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
      const int nsteps = (K + FP8D_KSTEP - 1) / FP8D_KSTEP;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int tok = nt * 8 + 2 * L.t + j;
          sc.xsc[nt][j] = tok < M ? xs[(long long)tok * nsteps + s] : 0.0f;
        }
      load_block_scales(sc.wsc, n0, s);
    }
  }

  // group: the 128x128 block scale of each row tile at step s.
  __device__ __forceinline__ void load_block_scales(float (&wsc)[MT], int n0, int s) const {
    const int nsteps = (K + FP8D_KSTEP - 1) / FP8D_KSTEP, nblk_n = (N + FP8D_WEIGHT_BLOCK - 1) / FP8D_WEIGHT_BLOCK;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int nb = (n0 + mt * 16) / FP8D_WEIGHT_BLOCK;
      wsc[mt] = nb < nblk_n ? ws[(long long)nb * nsteps + s] : 0.0f;
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

  // S: Scales, or a derived policy's own (xsc and wsc are all it reads).
  template <class S>
  __device__ __forceinline__ void finish(float (&acc)[MT][NT][4], const float (&part)[MT][NT][4], const S& sc) const {
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

#if !defined(FP8D_CFG_FQ) || !FP8D_CFG_FQ

// FP8D_CFG_U: K steps of weight loads each warp keeps in flight (GemvConfig.unroll).
extern "C" __global__ void __launch_bounds__(256, 2) fp8d_w8a8_gemv(
    const uint8_t* __restrict__ w, const float* __restrict__ ws, const uint8_t* __restrict__ xq,
    const float* __restrict__ xs, const void* __restrict__ bias, void* __restrict__ y, int M, int N, int K,
    int bias_kind, int out_kind) {
  const W8A8Gemv<FP8D_CFG_ACTQ, FP8D_CFG_NT, FP8D_CFG_MT, FP8D_CFG_U> p{ws, xs, M, N, K, xq};
  fp8d_skinny_gemv(p, w, bias, y, M, N, K, bias_kind, out_kind);
}
#else
#include "act_quant_common.cuh"
#ifndef FP8D_CFG_PERSIST
#define FP8D_CFG_PERSIST 0
#endif

// FQ: the W8A8 GEMV in ONE launch (kernels_cuda/_w8a8_fused.py, candidate cuda.w8a8_gemv_fq). Each CTA quantizes
// all of x into its shared memory in prologue(), right after the wait for the previous grid and while its first
// weight loads are in flight, and the loop reads the codes from there: no quantizer launch, no codes round trip
// through global memory, no grid boundary between the two. Codes and scales come from act_quant's device
// functions (fp8d_act_scale, fp8d_quant4), so y is bit-identical to the two-launch route. The price: every CTA
// repeats the M x K divisions, so it is built for the smallest M (the tuning tables decide where it wins).
// The parent's xq / xs point at the shared-memory codes (row pitch qpitch) and scales (act_quant's layouts).
template <int ACTQ, int NT_, int MT_, int DEPTH_>
struct W8A8GemvFq : W8A8Gemv<ACTQ, NT_, MT_, DEPTH_> {
  using Base = W8A8Gemv<ACTQ, NT_, MT_, DEPTH_>;
  using typename Base::Half;
  static constexpr bool kPrologue = true;
#if FP8D_CFG_PERSIST
  // The launcher's grid holds only the resident CTAs, each runs several row tiles, so x is quantized once per CTA
  // instead of once per row tile (kernels_cuda/_w8a8_fused.py sizes the grid). Declared only with FP8D_CFG_PERSIST:
  // the member alone changes the image of the one-CTA-per-tile module (NVRTC 13.0).
  static constexpr bool kPersistent = true;
#endif
  const void* __restrict__ x;
  int x_kind, qpitch;
  uint8_t* sq;  // == xq, writable
  float* ss;    // == xs, writable

  // Scale slots: 1 (tensor), M (token), M x ceil(K / 128) (group).
  __device__ static int slots(int M, int K) {
    return ACTQ == FP8D_ACTQ_TENSOR ? 1 : (ACTQ == FP8D_ACTQ_TOKEN ? M : M * ((K + FP8D_ACT_GROUP - 1) / FP8D_ACT_GROUP));
  }
  // The scale slot of 16-byte vector i of x ([M, K] row-major, vpr vectors a row, 2^gshift vectors a group).
  __device__ __forceinline__ int slot(int i, int vpr, int gshift) const {
    if constexpr (ACTQ == FP8D_ACTQ_TENSOR) {
      return 0;
    } else {
      const int tok = i / vpr;
      if constexpr (ACTQ == FP8D_ACTQ_TOKEN) return tok;
      return tok * ((this->K + FP8D_ACT_GROUP - 1) / FP8D_ACT_GROUP) + ((i - tok * vpr) >> gshift);
    }
  }

  // x -> codes and scales in shared memory, the whole CTA (x 16-byte aligned, K % 16 == 0: rows of whole
  // vectors). Pass 1: |x| max per slot, as integers: |x| and +NaN order like their bit patterns read as unsigned,
  // so an integer max is the NaN-propagating float max (act_quant's amax, in any order). Lanes first combine by
  // shuffles over aligned runs of `seg` lanes that provably share a slot (row and group starts are multiples of
  // seg vectors), then one shared-memory atomic per run. Pass 2 re-reads x (L1 hits) and writes the codes.
  __device__ __forceinline__ void prologue() const {
    amax_pass();
    const int M = this->M, K = this->K;
    const int per = x_kind == FP8D_DTYPE_F32 ? 4 : 8;
    const int vpr = K / per, nvec = M * vpr;
    const int gshift = per == 8 ? 4 : 5;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    const int nt = blockDim.x;
    for (int i = threadIdx.x; i < nvec; i += nt) {
      const int tok = i / vpr;
      fp8d_quant_store_vec(fp8d_load128_keep(xv + i), x_kind, sq + tok * qpitch, i - tok * vpr,
                           ss[slot(i, vpr, gshift)]);
    }
    __syncthreads();
  }

  // Pass 1 of prologue(): every scale slot's amax over x, then the scales into ss (all of the CTA, then a barrier).
  __device__ __forceinline__ void amax_pass() const {
    const int M = this->M, K = this->K;
    const int per = x_kind == FP8D_DTYPE_F32 ? 4 : 8;  // values per 16-byte vector
    const int vpr = K / per, nvec = M * vpr;
    const int gshift = per == 8 ? 4 : 5;               // a 128-value group: 16 or 32 vectors
    const int nslot = slots(M, K);
    int seg = 32;
    if constexpr (ACTQ != FP8D_ACTQ_TENSOR) seg = min(32, vpr & -vpr);
    if constexpr (ACTQ == FP8D_ACTQ_GROUP) seg = min(seg, 1 << gshift);
    unsigned* bits = reinterpret_cast<unsigned*>(ss);
    for (int j = threadIdx.x; j < nslot; j += blockDim.x) bits[j] = 0u;
    __syncthreads();
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    const int lane = threadIdx.x & 31, nt = blockDim.x;
    for (int base = 0; base < nvec; base += 2 * nt) {  // CTA-uniform trip count: the shuffles see whole warps
      uint4 v[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = base + r * nt + threadIdx.x;
        v[r] = i < nvec ? fp8d_load128_keep(xv + i) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = base + r * nt + threadIdx.x;
        float a = fp8d_vec_absmax(v[r], x_kind, 0.0f);  // 0 past the end: neutral
        for (int o = 1; o < seg; o <<= 1) a = fp8d_nanmax(a, fp8d_shfl_xor(a, o));
        if (i < nvec && (lane & (seg - 1)) == 0) atomicMax(bits + slot(i, vpr, gshift), __float_as_uint(a));
      }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < nslot; j += blockDim.x) ss[j] = fp8d_act_scale(__uint_as_float(bits[j]));
    __syncthreads();
  }

  // The parent's load_half, from shared memory at row pitch qpitch.
  __device__ __forceinline__ void load_half(Half& h, int, Fp8dLane L, int s, int q) const {
    const int kk = s * FP8D_KSTEP + fp8d_chunk_k(L.t, q);
#pragma unroll
    for (int nt = 0; nt < NT_; ++nt) {
      const int tok = nt * 8 + L.g;
      h.x[nt] = (tok < this->M && kk < this->K) ? *reinterpret_cast<const uint4*>(sq + tok * qpitch + kk)
                                                : make_uint4(0u, 0u, 0u, 0u);
    }
  }
};

#ifndef FP8D_CFG_INLINE
#define FP8D_CFG_INLINE 0
#endif
#if !FP8D_CFG_INLINE
// x [M, K] (x_kind: bf16 / f16 / f32, 16-byte aligned) is quantized by every CTA into its dynamic shared memory
// after the driver's layout: the scales (a multiple of 4 slots), then the codes at row pitch qpitch (a multiple
// of 16). kernels_cuda/_w8a8_fused.py sizes both.
extern "C" __global__ void __launch_bounds__(256, 2) fp8d_w8a8_gemv_fq(
    const uint8_t* __restrict__ w, const float* __restrict__ ws, const void* __restrict__ x, int x_kind,
    const void* __restrict__ bias, void* __restrict__ y, int M, int N, int K, int qpitch, int bias_kind,
    int out_kind) {
  using P = W8A8GemvFq<FP8D_CFG_ACTQ, FP8D_CFG_NT, FP8D_CFG_MT, FP8D_CFG_U>;
  extern __shared__ float fp8d_red[];
  float* ss = Fp8dSmemLayout<FP8D_CFG_MT, FP8D_CFG_NT>::end(fp8d_red, blockDim.x >> 5, 0, blockDim.x);
  uint8_t* sq = reinterpret_cast<uint8_t*>(ss + ((P::slots(M, K) + 3) & ~3));
  const P p{{ws, ss, M, N, K, sq}, x, x_kind, qpitch, sq, ss};
  fp8d_skinny_gemv(p, w, bias, y, M, N, K, bias_kind, out_kind);
}
#else
#if !defined(FP8D_CFG_QT) || !defined(FP8D_CFG_XKIND)
#error "FP8D_CFG_QT / FP8D_CFG_XKIND: compile through kernels_cuda._w8a8_inline"
#endif
// INLINE (kernels_cuda/_w8a8_inline.py, candidate cuda.w8a8_gemv_inline): the W8A8 GEMV in one launch with no quantized
// copy of x anywhere. The warp that owns a K step quantizes that step of x in registers just before its MMAs: each lane
// loads 4 values of each of the QT tokens (x bf16 / f16: FP8D_CFG_XKIND), the warp reduces the 1x128 group's amax
// (fp8_block; per tensor / per token the CTA computed the amax of all of x once, amax_pass, right after the wait), each
// lane encodes its 4 values, and 8 shuffles per token hand each lane the 32 codes its MMA fragment holds. That is
// act_quant.cu's group kernel, warp for warp (one warp per group, 4 values a lane, the same fp8d_act_scale and
// fp8d_quant4): codes and scales bit-identical to the quantizer's, so y is the two-launch route's. Why: the quantizer
// launch, its grid boundary and the round trip of the codes go away, and unlike fp8d_w8a8_gemv_fq nothing waits
// for a whole-x prologue before the weight loop (none at all for 1x128 groups). The price: every CTA repeats the M x K
// divisions, spread over its K loop; built for the smallest M (M <= 2; the tuning tables decide where it wins).
template <int ACTQ, int NT_, int MT_, int DEPTH_, int QT>
struct W8A8GemvInline : W8A8GemvFq<ACTQ, NT_, MT_, DEPTH_> {
  using Fq = W8A8GemvFq<ACTQ, NT_, MT_, DEPTH_>;
  using typename Fq::Half;
  static_assert(QT >= 1 && QT <= 8 * NT_, "FP8D_CFG_QT: 1 .. 8 x token tiles");
  static_assert(FP8D_CFG_XKIND != FP8D_DTYPE_F32, "x is bf16 or f16 (4 values = 8 bytes a lane)");
  static constexpr bool kQuantizesSteps = true;
  static constexpr int kHalfRegs = 0;  // load_half loads nothing: x arrives with the step's scales
  struct Scales {
    uint2 raw[QT];       // lane l: values 4l .. 4l + 3 of the step's 128 for token j (16-bit bits)
    float xsc[NT_][2];   // group: x scale of tokens 2t, 2t + 1 of each token tile (quantize_step fills it)
    float wsc[MT_];      // group: weight block scale per row tile
  };
  static constexpr int kScaleRegs = 2 * QT + (ACTQ == FP8D_ACTQ_GROUP ? 2 * NT_ + MT_ : 0);

  // tensor / token: the amax of all of x, once per CTA (the scales land in ss). group: nothing before the loop.
  __device__ __forceinline__ void prologue() const {
    if constexpr (ACTQ != FP8D_ACTQ_GROUP) this->amax_pass();
  }

  __device__ __forceinline__ void load_half(Half&, int, Fp8dLane, int, int) const {}

  __device__ __forceinline__ void load_scales(Scales& sc, int n0, Fp8dLane L, int s) const {
    const int kk = s * FP8D_KSTEP + 4 * (L.g * 4 + L.t);  // K % 16 == 0: a lane's 4 values are all in or all out
    const unsigned short* xh = reinterpret_cast<const unsigned short*>(this->x);
#pragma unroll
    for (int j = 0; j < QT; ++j)
      sc.raw[j] = (j < this->M && kk < this->K) ? *reinterpret_cast<const uint2*>(xh + (long long)j * this->K + kk)
                                                : make_uint2(0u, 0u);
    if constexpr (ACTQ == FP8D_ACTQ_GROUP) this->load_block_scales(sc.wsc, n0, s);
  }

  // The step's codes for the MMAs (h[q].x[nt]: lane (g, t) holds token 8 nt + g at K offsets 64 q + 16 t .. + 16, the
  // words 16 q + 4 t .. + 3 of the step, made by lanes 16 q + 4 t .. + 3) and, for groups, the x scales. All QT tokens
  // go through each phase together (tokens >= M are zeros: their codes are 0 and no fragment keeps them): the
  // tokens' shuffle and division chains are independent, so they interleave instead of running one after another.
  __device__ __forceinline__ void quantize_step(Half (&h)[2], Scales& sc, Fp8dLane L) const {
    float v[QT][4];
#pragma unroll
    for (int j = 0; j < QT; ++j) {
      fp8d_word_halves(sc.raw[j].x, FP8D_CFG_XKIND, v[j][0], v[j][1]);
      fp8d_word_halves(sc.raw[j].y, FP8D_CFG_XKIND, v[j][2], v[j][3]);
    }
    float s[QT];
    if constexpr (ACTQ == FP8D_ACTQ_GROUP) {
      // the group's amax as act_quant's group kernel takes it: from 0 over the lane's 4 values, then fp8d_warp_max's
      // butterfly, stage by stage for all tokens
#pragma unroll
      for (int j = 0; j < QT; ++j) {
        s[j] = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) s[j] = fp8d_nanmax(s[j], fabsf(v[j][i]));
      }
#pragma unroll
      for (int o = FP8D_WARP_SIZE / 2; o > 0; o >>= 1)
#pragma unroll
        for (int j = 0; j < QT; ++j) s[j] = fp8d_nanmax(s[j], fp8d_shfl_xor(s[j], o));
#pragma unroll
      for (int j = 0; j < QT; ++j) s[j] = fp8d_act_scale(s[j]);
    } else {
#pragma unroll
      for (int j = 0; j < QT; ++j) s[j] = this->ss[ACTQ == FP8D_ACTQ_TENSOR ? 0 : min(j, this->M - 1)];
    }
    unsigned c[QT];
#pragma unroll
    for (int j = 0; j < QT; ++j) c[j] = fp8d_quant4(v[j][0], v[j][1], v[j][2], v[j][3], s[j]);
    constexpr int kHalfWords = FP8D_KSTEP / 8;  // 16 words of 4 codes: one q half of the step
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      unsigned wd[NT_][4];
#pragma unroll
      for (int nt = 0; nt < NT_; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) wd[nt][i] = 0u;
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < QT; ++j) {
          const unsigned got = fp8d_shfl_idx(c[j], kHalfWords * q + 4 * L.t + i);
          if (L.g == (j & 7)) wd[j / 8][i] = got;
        }
#pragma unroll
      for (int nt = 0; nt < NT_; ++nt) h[q].x[nt] = make_uint4(wd[nt][0], wd[nt][1], wd[nt][2], wd[nt][3]);
    }
    if constexpr (ACTQ == FP8D_ACTQ_GROUP) {
#pragma unroll
      for (int nt = 0; nt < NT_; ++nt)
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          float x = 0.0f;  // tokens past QT (and, below, past M) scale nothing
#pragma unroll
          for (int j = 0; j < QT; ++j)
            if (j / 8 == nt && 2 * L.t + jj == (j & 7) && j < this->M) x = s[j];
          sc.xsc[nt][jj] = x;
        }
    }
  }
};

// x [M, K] (bf16 / f16 by FP8D_CFG_XKIND, 8-byte aligned rows: K % 16 == 0). Dynamic shared memory: the GEMV's own
// layout (with its weight ring, if any), then the tensor / token scales (kernels_cuda/_w8a8_inline.py sizes it).
extern "C" __global__ void __launch_bounds__(256, 2) fp8d_w8a8_gemv_inline(
    const uint8_t* __restrict__ w, const float* __restrict__ ws, const void* __restrict__ x,
    const void* __restrict__ bias, void* __restrict__ y, int M, int N, int K, int bias_kind, int out_kind) {
  using P = W8A8GemvInline<FP8D_CFG_ACTQ, FP8D_CFG_NT, FP8D_CFG_MT, FP8D_CFG_U, FP8D_CFG_QT>;
  extern __shared__ float fp8d_red[];
#if defined(FP8D_SMEM_RING) && FP8D_SMEM_RING
  constexpr int kRing = FP8D_SMEM_RING;
#else
  constexpr int kRing = 0;
#endif
  float* ss = Fp8dSmemLayout<FP8D_CFG_MT, FP8D_CFG_NT>::end(fp8d_red, blockDim.x >> 5, kRing, blockDim.x);
  const P p{{{ws, ss, M, N, K, nullptr}, x, FP8D_CFG_XKIND, 0, nullptr, ss}};
  fp8d_skinny_gemv(p, w, bias, y, M, N, K, bias_kind, out_kind);
}
#endif
#endif


// w8a16_wmma_gfx12.hip: W8A16 decode (M <= 16 * FP8D_WMMA_MT) on RDNA4: fp8 weights decoded by
// v_cvt_pk_f32_fp8 to bf16 (or f16), multiplied with the bf16/f16 activations by v_wmma_f32_16x16x16_*.
//
// Why not the shared gemv_w8a16.cu: its fragments are mma.sync's (m16n8k16), which gfx12 lacks; the
// portable emulation costs hundreds of lane shuffles per step and spills (see the ISA report). This file is
// the same algorithm expressed in RDNA4's own matrix fragments.
//
// Exactness of the decode: every e4m3 value has at most 4 significant bits and lies in [2^-9, 448], so it is
// exact in bf16 (take the high half of its f32) and in f16 (v_cvt_pkrtz, no rounding happens). Weight
// scales are applied to the fp32 accumulators, never to the bf16 weights (an MX scale could push a bf16
// weight into subnormals and round it; fp32 keeps it exact as the reference does):
//   tensor / row : scale once in the epilogue
//   block        : per 128-wide K step, acc += step_acc * s[n / 128, step]
//   mx           : per 32-wide K chunk (one WMMA pair covers exactly one MX group), acc += part * 2^e[n, group]
//
// Geometry and the K permutation are those of w8a8_wmma_gfx12.hip: one block per 16 output columns,
// FP8D_WMMA_WAVES waves split K in 128-wide steps; a lane's 16 weight codes (one global_load_b128) and its
// 16 activations (two global_load_b128) cover the same K, so A and B agree on the permutation.
// Requirements (checked by the launcher, stated by the candidate): K % 16 == 0, 16-byte aligned rows.
#include "fp8_common.cuh"

#if !FP8D_HW_HAS_FP8_WMMA
#error "w8a16_wmma_gfx12.hip is written for gfx12's WMMA fragments"
#endif

#ifndef FP8D_WMMA_WAVES
#define FP8D_WMMA_WAVES 4
#endif
#ifndef FP8D_WMMA_MT
#define FP8D_WMMA_MT 1
#endif

typedef unsigned fp8d_u32x4 __attribute__((ext_vector_type(4)));
typedef short fp8d_i16x8 __attribute__((ext_vector_type(8)));
typedef _Float16 fp8d_f16x8 __attribute__((ext_vector_type(8)));
typedef _Float16 fp8d_f16x2 __attribute__((ext_vector_type(2)));

// 8 codes (two words) -> one B fragment of 8 bf16/f16 values, element i = code i.
template <int XKIND>
__device__ __forceinline__ fp8d_u32x4 fp8d_decode8_frag(unsigned w0, unsigned w1) {
  float v[8];
  fp8d_decode4(w0, v);
  fp8d_decode4(w1, v + 4);
  fp8d_u32x4 r;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    unsigned packed;
    if constexpr (XKIND == FP8D_DTYPE_F16) {
      packed = __builtin_bit_cast(unsigned, __builtin_amdgcn_cvt_pkrtz(v[2 * i], v[2 * i + 1]));  // exact here
    } else {
      const unsigned lo = __float_as_uint(v[2 * i]), hi = __float_as_uint(v[2 * i + 1]);
      packed = (lo >> 16) | (hi & 0xffff0000u);  // exact: the low 16 bits of an e4m3 value's f32 are zero
    }
    r[i] = packed;
  }
  return r;
}

template <int XKIND>
__device__ __forceinline__ fp8d_f32x8 fp8d_wmma16(fp8d_u32x4 a, fp8d_u32x4 b, fp8d_f32x8 c) {
  if constexpr (XKIND == FP8D_DTYPE_F16) {
    return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(__builtin_bit_cast(fp8d_f16x8, a),
                                                             __builtin_bit_cast(fp8d_f16x8, b), c);
  } else {
    return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(__builtin_bit_cast(fp8d_i16x8, a),
                                                              __builtin_bit_cast(fp8d_i16x8, b), c);
  }
}

template <int SCALE, int XKIND>
__device__ __forceinline__ void w8a16_wmma_body(const unsigned char* __restrict__ w, const void* __restrict__ wscale,
                                                const unsigned short* __restrict__ x, const void* __restrict__ bias,
                                                void* __restrict__ y, int M, int N, int K, int bias_kind,
                                                int out_kind) {
  constexpr int WAVES = FP8D_WMMA_WAVES, MT = FP8D_WMMA_MT;
  const int lane = (int)(threadIdx.x & 31u), wave = (int)(threadIdx.x >> 5);
  const int col = lane & 15, grp = lane >> 4;
  const int n = (int)blockIdx.x * 16 + col;
  const int steps = (K + FP8D_KSTEP - 1) / FP8D_KSTEP;
  const int mx_groups = (K + FP8D_MX_GROUP - 1) / FP8D_MX_GROUP;

  fp8d_f32x8 acc[MT];
#pragma unroll
  for (int t = 0; t < MT; ++t) acc[t] = fp8d_f32x8{};

  const unsigned char* wrow = w + (long long)n * K;
  for (int s = wave; s < steps; s += WAVES) {  // wave-uniform: WMMA always runs with all lanes active
    const int kbase = s * FP8D_KSTEP + 16 * grp;
    fp8d_u32x4 wf[4], xa[MT][4][2];
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // the weight stream first: 64 bytes per lane in flight
      const int k = kbase + 32 * j;
      wf[j] = fp8d_u32x4{};
      if (n < N && k < K) wf[j] = *reinterpret_cast<const fp8d_u32x4*>(wrow + k);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int k = kbase + 32 * j;
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const int m = t * 16 + col;
        xa[t][j][0] = fp8d_u32x4{};
        xa[t][j][1] = fp8d_u32x4{};
        if (m < M && k < K) {
          const fp8d_u32x4* px = reinterpret_cast<const fp8d_u32x4*>(x + (long long)m * K + k);
          xa[t][j][0] = px[0];
          xa[t][j][1] = px[1];
        }
      }
    }
    fp8d_f32x8 step_acc[MT];
#pragma unroll
    for (int t = 0; t < MT; ++t) step_acc[t] = fp8d_f32x8{};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const fp8d_u32x4 b0 = fp8d_decode8_frag<XKIND>(wf[j].x, wf[j].y);
      const fp8d_u32x4 b1 = fp8d_decode8_frag<XKIND>(wf[j].z, wf[j].w);
      if constexpr (SCALE == FP8D_SCALE_MX) {
        const int g32 = 4 * s + j;  // the one MX group this j-chunk covers (both lane groups)
        const unsigned code = (n < N && g32 < mx_groups)
                                  ? (unsigned)reinterpret_cast<const unsigned char*>(wscale)[(long long)n * mx_groups + g32]
                                  : (unsigned)FP8D_E8M0_BIAS;
        const float e = fp8d_e8m0_to_f32(code);
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          fp8d_f32x8 part = fp8d_wmma16<XKIND>(xa[t][j][0], b0, fp8d_f32x8{});
          part = fp8d_wmma16<XKIND>(xa[t][j][1], b1, part);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[t][i] = fmaf(part[i], e, acc[t][i]);
        }
      } else {
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          fp8d_f32x8& d = (SCALE == FP8D_SCALE_BLOCK) ? step_acc[t] : acc[t];
          d = fp8d_wmma16<XKIND>(xa[t][j][0], b0, d);
          d = fp8d_wmma16<XKIND>(xa[t][j][1], b1, d);
        }
      }
    }
    if constexpr (SCALE == FP8D_SCALE_BLOCK) {
      const int nblk_n = (N + FP8D_WEIGHT_BLOCK - 1) / FP8D_WEIGHT_BLOCK;
      const int nb = n / FP8D_WEIGHT_BLOCK;
      const float sc = (n < N && nb < nblk_n) ? reinterpret_cast<const float*>(wscale)[(long long)nb * steps + s] : 0.f;
#pragma unroll
      for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[t][i] = fmaf(step_acc[t][i], sc, acc[t][i]);
    }
  }

  if (WAVES > 1) {  // K-split partials, summed by wave 0 in wave order (deterministic)
    __shared__ float red[(WAVES > 1 ? WAVES - 1 : 1) * MT * 8 * 32];
    if (wave > 0) {
#pragma unroll
      for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int i = 0; i < 8; ++i) red[(((wave - 1) * MT + t) * 8 + i) * 32 + lane] = acc[t][i];
    }
    __syncthreads();
    if (wave != 0) return;
    for (int v = 0; v < WAVES - 1; ++v)
#pragma unroll
      for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[t][i] += red[((v * MT + t) * 8 + i) * 32 + lane];
  }
  if (n >= N) return;
  float sc = 1.f;
  if (SCALE == FP8D_SCALE_TENSOR) sc = reinterpret_cast<const float*>(wscale)[0];
  if (SCALE == FP8D_SCALE_ROW) sc = reinterpret_cast<const float*>(wscale)[n];
  const float b = bias ? fp8d_load_as_f32(bias, n, bias_kind) : 0.f;
#pragma unroll
  for (int t = 0; t < MT; ++t)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int m = t * 16 + 8 * grp + i;  // D layout: lane holds column n, rows 8 * (lane / 16) + i
      if (m < M) fp8d_store_from_f32(y, (long long)m * N + n, acc[t][i] * sc + b, out_kind);
    }
}

#define FP8D_W8A16_WMMA_KERNEL(name, SCALE, XKIND)                                                           \
  extern "C" __global__ void __launch_bounds__(FP8D_WMMA_WAVES * 32)                                          \
      name(const unsigned char* __restrict__ w, const void* __restrict__ wscale, const unsigned short* __restrict__ x, \
           const void* __restrict__ bias, void* __restrict__ y, int M, int N, int K, int bias_kind, int out_kind) { \
    w8a16_wmma_body<SCALE, XKIND>(w, wscale, x, bias, y, M, N, K, bias_kind, out_kind);                      \
  }

FP8D_W8A16_WMMA_KERNEL(w8a16_wmma_gfx12_tensor_bf16, FP8D_SCALE_TENSOR, FP8D_DTYPE_BF16)
FP8D_W8A16_WMMA_KERNEL(w8a16_wmma_gfx12_row_bf16, FP8D_SCALE_ROW, FP8D_DTYPE_BF16)
FP8D_W8A16_WMMA_KERNEL(w8a16_wmma_gfx12_block_bf16, FP8D_SCALE_BLOCK, FP8D_DTYPE_BF16)
FP8D_W8A16_WMMA_KERNEL(w8a16_wmma_gfx12_mx_bf16, FP8D_SCALE_MX, FP8D_DTYPE_BF16)
FP8D_W8A16_WMMA_KERNEL(w8a16_wmma_gfx12_tensor_f16, FP8D_SCALE_TENSOR, FP8D_DTYPE_F16)
FP8D_W8A16_WMMA_KERNEL(w8a16_wmma_gfx12_row_f16, FP8D_SCALE_ROW, FP8D_DTYPE_F16)
FP8D_W8A16_WMMA_KERNEL(w8a16_wmma_gfx12_block_f16, FP8D_SCALE_BLOCK, FP8D_DTYPE_F16)
FP8D_W8A16_WMMA_KERNEL(w8a16_wmma_gfx12_mx_f16, FP8D_SCALE_MX, FP8D_DTYPE_F16)

// w8a8_wmma_gfx12.hip: W8A8 decode (M <= 16 * FP8D_WMMA_MT) on RDNA4 matrix cores.
//
// y[m, n] = sum_k xq[m, k] * w[n, k] * scales (+ bias[n]), with e4m3 x e4m3 products accumulated in f32
// by v_wmma_f32_16x16x16_fp8_fp8. Why WMMA at decode: a VALU GEMV spends a decode plus M FMAs per weight
// byte, which at M = 16 on gfx1201 costs more issue slots than 612 GB/s of weight can feed; the matrix
// core does the same 16 x 16 x 16 block in one instruction, so the kernel stays at the memory roofline.
//
// Work split: one block per 16 output columns (n0 .. n0 + 15); its FP8D_WMMA_WAVES waves split K in
// 128-wide steps (step s goes to wave s % WAVES) and reduce through LDS at the end.
//
// K permutation: WMMA only needs A and B to agree on which K each (lane, byte) holds. Each lane loads
// 16 contiguous codes with one 128-bit load (global_load_b128) -- lane group g = lane / 16 at K offset
// 32 * j + 16 * g of the step -- and feeds the low 8 bytes to one WMMA and the high 8 to the next. A and
// B use the same mapping, so the sum over K is unchanged.
//
// Scale modes (compile-time, one kernel each):
//   tensor: y = acc * xs[0] * ws[0]               (per-tensor x, per-tensor w)
//   row:    y = acc * xs[m] * ws[n]               (per-token x [M, 1], per-row w [N])
//   block:  acc += step_acc * xs[m, s] * ws[n / 128, s] per 128-wide K group s (DeepSeek-V3 1x128 x 128x128)
// Requirements the launcher checks (and the candidate's support predicate states): K % 16 == 0, xq and w
// 16-byte aligned, contiguous. M, N, K are runtime values; nothing here branches on tensor contents.
#include "fp8_common.cuh"  // format constants (-D from dispatch.formats), enum codes, stores; pulls gfx12_fp8.h

#if !FP8D_HW_HAS_FP8_WMMA
#error "w8a8_wmma_gfx12.hip needs v_wmma_f32_16x16x16_fp8_fp8 (gfx12)"
#endif

#ifndef FP8D_WMMA_WAVES
#define FP8D_WMMA_WAVES 4  // waves per block = K split; tuned by the candidate's config
#endif
#ifndef FP8D_WMMA_MT
#define FP8D_WMMA_MT 1  // 16-row M tiles per block (M <= 16 * MT)
#endif

// One K step per wave iteration is one fp8_block group (fp8_common.cuh asserts both are 128).
#define FP8D_STEP_K FP8D_KSTEP

typedef unsigned fp8d_u32x4 __attribute__((ext_vector_type(4)));

template <int SCALE>
__device__ __forceinline__ void w8a8_wmma_body(const unsigned char* __restrict__ xq, const float* __restrict__ xs,
                                               const unsigned char* __restrict__ w, const float* __restrict__ ws,
                                               const void* __restrict__ bias, int bias_kind, void* __restrict__ y,
                                               int out_kind, int M, int N, int K) {
  constexpr int WAVES = FP8D_WMMA_WAVES, MT = FP8D_WMMA_MT;
  const int lane = (int)(threadIdx.x & 31u);
  const int wave = (int)(threadIdx.x >> 5);
  const int col = lane & 15;  // A row / B column / D column this lane owns
  const int grp = lane >> 4;  // which 16-code half of each 32-code chunk
  const int n0 = (int)blockIdx.x * 16;
  const int n = n0 + col;
  const int steps = (K + FP8D_STEP_K - 1) / FP8D_STEP_K;
  const int kgroups = steps;  // block mode: x/w scale columns (ceil(K / 128))

  fp8d_f32x8 acc[MT];
#pragma unroll
  for (int t = 0; t < MT; ++t) acc[t] = fp8d_f32x8{};

  const unsigned char* wrow = w + (long long)n * K;
  for (int s = wave; s < steps; s += WAVES) {  // wave-uniform trip count: WMMA below runs with EXEC full
    const int kbase = s * FP8D_STEP_K + 16 * grp;
    fp8d_u32x4 wf[4], af[MT][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int k = kbase + 32 * j;
      wf[j] = fp8d_u32x4{};
      if (n < N && k < K) wf[j] = *reinterpret_cast<const fp8d_u32x4*>(wrow + k);
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const int m = t * 16 + col;
        af[t][j] = fp8d_u32x4{};
        if (m < M && k < K) af[t][j] = *reinterpret_cast<const fp8d_u32x4*>(xq + (long long)m * K + k);
      }
    }
    fp8d_f32x8 part[MT];
#pragma unroll
    for (int t = 0; t < MT; ++t) part[t] = (SCALE == FP8D_SCALE_BLOCK) ? fp8d_f32x8{} : acc[t];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const fp8d_i32x2 blo = {(int)wf[j].x, (int)wf[j].y}, bhi = {(int)wf[j].z, (int)wf[j].w};
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const fp8d_i32x2 alo = {(int)af[t][j].x, (int)af[t][j].y}, ahi = {(int)af[t][j].z, (int)af[t][j].w};
        part[t] = fp8d_wmma_fp8(alo, blo, part[t]);
        part[t] = fp8d_wmma_fp8(ahi, bhi, part[t]);
      }
    }
    if (SCALE == FP8D_SCALE_BLOCK) {
      const float wsc = (n < N) ? ws[(long long)(n / FP8D_WEIGHT_BLOCK) * kgroups + s] : 0.f;
#pragma unroll
      for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const int m = t * 16 + 8 * grp + e;
          const float xsc = (m < M) ? xs[(long long)m * kgroups + s] : 0.f;
          acc[t][e] += part[t][e] * (xsc * wsc);
        }
    } else {
#pragma unroll
      for (int t = 0; t < MT; ++t) acc[t] = part[t];
    }
  }

  // Cross-wave reduction: waves 1.. park their accumulators in LDS, wave 0 adds them and stores.
  if (WAVES > 1) {
    __shared__ float red[(WAVES > 1 ? WAVES - 1 : 1) * MT * 8 * 32];
    if (wave > 0) {
#pragma unroll
      for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int e = 0; e < 8; ++e) red[(((wave - 1) * MT + t) * 8 + e) * 32 + lane] = acc[t][e];
    }
    __syncthreads();
    if (wave != 0) return;
    for (int v = 0; v < WAVES - 1; ++v)
#pragma unroll
      for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[t][e] += red[((v * MT + t) * 8 + e) * 32 + lane];
  }
  if (n >= N) return;
  float wsc = 1.f;
  if (SCALE == FP8D_SCALE_TENSOR) wsc = ws[0] * xs[0];
  if (SCALE == FP8D_SCALE_ROW) wsc = ws[n];
  const float b = bias ? fp8d_load_as_f32(bias, n, bias_kind) : 0.f;
#pragma unroll
  for (int t = 0; t < MT; ++t)
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int m = t * 16 + 8 * grp + e;
      if (m >= M) continue;
      float v = acc[t][e];
      if (SCALE == FP8D_SCALE_TENSOR) v *= wsc;
      if (SCALE == FP8D_SCALE_ROW) v *= xs[m] * wsc;
      fp8d_store_from_f32(y, (long long)m * N + n, v + b, out_kind);
    }
}

// Output and bias dtypes are runtime codes (FP8D_DTYPE_*): a wave-uniform branch per store, one kernel
// per scale mode instead of nine.
#define FP8D_WMMA_KERNEL(name, SCALE)                                                                       \
  extern "C" __global__ void __launch_bounds__(FP8D_WMMA_WAVES * 32)                                         \
      name(const unsigned char* __restrict__ xq, const float* __restrict__ xs, const unsigned char* __restrict__ w, \
           const float* __restrict__ ws, const void* __restrict__ bias, int bias_kind, void* __restrict__ y,     \
           int out_kind, int M, int N, int K) {                                                              \
    w8a8_wmma_body<SCALE>(xq, xs, w, ws, bias, bias_kind, y, out_kind, M, N, K);                             \
  }

FP8D_WMMA_KERNEL(w8a8_wmma_gfx12_tensor, FP8D_SCALE_TENSOR)
FP8D_WMMA_KERNEL(w8a8_wmma_gfx12_row, FP8D_SCALE_ROW)
FP8D_WMMA_KERNEL(w8a8_wmma_gfx12_block, FP8D_SCALE_BLOCK)

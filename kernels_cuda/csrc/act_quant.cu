// act_quant.cu: dynamic activation quantization, bit-identical to dispatch.quantize_activation:
//   s = max(amax, AMAX_FLOOR) / 448 (IEEE division, NaN propagating);  q = e4m3_rne(clamp(v / s, +-448))
// Input x [M, K] contiguous in bf16 / f16 / f32 (x_kind, runtime: one uniform branch per load).
// Every maximum is NaN-propagating and order-free, so the results do not depend on the thread layout.
// Each kernel lets its dependent start at once and then waits for the previous grid before reading x
// (fp8d_allow_dependent_grid / fp8d_wait_prior_grid, no-ops without a programmatic dependent launch). So in a
// chain GEMV_1 -> quant_2 -> GEMV_2, GEMV_2 is launched while GEMV_1 still runs (quant_2 starts during GEMV_1's
// last wave and triggers at entry) and streams its weights during GEMV_1's tail and quant_2, as consecutive
// W8A16 GEMVs do; triggering after the wait serialized every W8A8 layer behind the previous one. Safe because
// GEMV_2 reads only weight codes before its own wait, and that wait returns after quant_2 completed, which
// was after GEMV_1 completed (quant_2's wait): everything both wrote is visible to it.
#include "act_quant_common.cuh"

__device__ __forceinline__ void fp8d_act_quant_enter() {
  fp8d_allow_dependent_grid();
  fp8d_wait_prior_grid();
}

__device__ __forceinline__ float fp8d_block_max(float v, float* sm) {
  // sm: >= 32 floats of shared memory. Returns the CTA-wide NaN-propagating max to every thread.
  v = fp8d_warp_max(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  __syncthreads();  // sm may be reused by the caller
  if (lane == 0) sm[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? sm[lane] : 0.0f;
  r = fp8d_warp_max(r);
  return r;
}

// Store the four codes of elements [i0, i0 + 4) (those < end): one 4-byte store where aligned.
__device__ __forceinline__ void fp8d_store_codes4(uint8_t* codes, long long i0, long long end, unsigned q,
                                                  bool aligned4) {
  if (aligned4 && i0 + 4 <= end) {
    *reinterpret_cast<unsigned*>(codes + i0) = q;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (i0 + j < end) codes[i0 + j] = (uint8_t)(q >> (8 * j));
  }
}

// Quantize elements [i0, i0 + 4) (those < end) of a flat array with scale s; `codes` byte i = element i.
__device__ __forceinline__ void fp8d_quant_store4(const void* x, int x_kind, uint8_t* codes, long long i0,
                                                  long long end, float s, bool aligned4) {
  float v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = (i0 + j < end) ? fp8d_load_as_f32(x, i0 + j, x_kind) : 0.0f;
  fp8d_store_codes4(codes, i0, end, fp8d_quant4(v[0], v[1], v[2], v[3], s), aligned4);
}

// Vectors of x a thread of the single-read per-token path holds in registers between the amax and the codes.
#define FP8D_ACTQ_VECS 2
// The single-read path on (1) or off (0: every row takes the two-read loops, as before session 19):
// tools.perf.ab_pdl --family cuda_act_quant compiles the module both ways (-DFP8D_ACTQ_SINGLE_READ=0). Measured on
// the H200 under the W8A8 GEMV (session 19, 21 cells per M): 0.917-0.936x the route's time at M = 1, 4, 16. The
// one-launch per-tensor kernel below keeps its second read (from L1: its CTA has just read all of x): a register-
// held variant ran 1.03x / 1.01x slower at M = 1 / 4 (one or two CTAs, half of their threads idle, each with twice
// the divisions) and 0.97x at M = 16 (docs/perf/h200_s19_2026-11-30.md).
#ifndef FP8D_ACTQ_SINGLE_READ
#define FP8D_ACTQ_SINGLE_READ 1
#endif

// Per token: one CTA per row m. scales[m] (the [M, 1] tensor).
// Rows of whole 16-byte vectors (x aligned, K a multiple of 8 values, or of 4 for f32) that fit in
// FP8D_ACTQ_VECS vectors a thread are read ONCE: the values stay in registers across the CTA's max, so the
// codes need no second read of x (the critical path of a decode step: one load round trip, not two). Other rows
// (a uniform branch) read x twice: an amax loop, then a loop of 4-value stores.
extern "C" __global__ void __launch_bounds__(1024) fp8d_act_quant_token(const void* __restrict__ x, int x_kind,
                                                                         uint8_t* __restrict__ codes,
                                                                         float* __restrict__ scales, int K) {
  fp8d_act_quant_enter();
  __shared__ float sm[32];
  const long long base = (long long)blockIdx.x * K;
  const int per = x_kind == FP8D_DTYPE_F32 ? 4 : 8;
  const int nvec = K / per;
  if (FP8D_ACTQ_SINGLE_READ && K % per == 0 && nvec <= FP8D_ACTQ_VECS * (int)blockDim.x &&
      (reinterpret_cast<unsigned long long>(x) & 15ull) == 0ull) {
    const uint4* xv = reinterpret_cast<const uint4*>(x) + (long long)blockIdx.x * nvec;
    uint4 v[FP8D_ACTQ_VECS];
    float amax = 0.0f;
#pragma unroll
    for (int r = 0; r < FP8D_ACTQ_VECS; ++r) {
      const int i = threadIdx.x + r * blockDim.x;
      v[r] = i < nvec ? fp8d_load128_keep(xv + i) : make_uint4(0u, 0u, 0u, 0u);
      amax = fp8d_vec_absmax(v[r], x_kind, amax);
    }
    amax = fp8d_block_max(amax, sm);
    const float s = fp8d_act_scale(amax);
    if (threadIdx.x == 0) scales[blockIdx.x] = s;
#pragma unroll
    for (int r = 0; r < FP8D_ACTQ_VECS; ++r) {
      const int i = threadIdx.x + r * blockDim.x;
      if (i < nvec) fp8d_quant_store_vec(v[r], x_kind, codes, (long long)blockIdx.x * nvec + i, s);
    }
    return;
  }
  float amax = 0.0f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) amax = fp8d_nanmax(amax, fabsf(fp8d_load_as_f32(x, base + k, x_kind)));
  amax = fp8d_block_max(amax, sm);
  const float s = fp8d_act_scale(amax);
  if (threadIdx.x == 0) scales[blockIdx.x] = s;
  const bool aligned4 = (K & 3) == 0;
  for (int k = 4 * threadIdx.x; k < K; k += 4 * blockDim.x) fp8d_quant_store4(x, x_kind, codes, base + k, base + K, s, aligned4);
}

// Per token and 1x128 group: one warp per (m, group); scales [M, ceil(K/128)]. The last group may be
// partial: its amax is over the values that exist, like the reference.
extern "C" __global__ void __launch_bounds__(256) fp8d_act_quant_group(const void* __restrict__ x, int x_kind,
                                                                        uint8_t* __restrict__ codes,
                                                                        float* __restrict__ scales, int M, int K) {
  fp8d_act_quant_enter();
  const int groups = (K + FP8D_ACT_GROUP - 1) / FP8D_ACT_GROUP;
  const long long item = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= (long long)M * groups) return;  // whole warps exit together
  const int lane = threadIdx.x & 31;
  const long long m = item / groups;
  const int grp = (int)(item % groups);
  const long long row0 = m * K, end = row0 + K;
  const long long i0 = row0 + (long long)grp * FP8D_ACT_GROUP + 4 * lane;
  static_assert(FP8D_ACT_GROUP == 4 * 32, "one warp covers a group with 4 values per lane");
  float v[4];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[j] = (i0 + j < end) ? fp8d_load_as_f32(x, i0 + j, x_kind) : 0.0f;
    amax = fp8d_nanmax(amax, fabsf(v[j]));
  }
  amax = fp8d_warp_max(amax);
  const float s = fp8d_act_scale(amax);
  if (lane == 0) scales[item] = s;
  fp8d_store_codes4(codes, i0, end, fp8d_quant4(v[0], v[1], v[2], v[3], s), (K & 3) == 0);
}

// Per-tensor tail: the scale of the CTA-wide amax (every CTA holds the same one), written by CTA 0, and
// this CTA's grid-stride share of the codes.
__device__ __forceinline__ void fp8d_quantize_grid_share(float amax, const void* __restrict__ x, int x_kind,
                                                         uint8_t* __restrict__ codes, float* __restrict__ scale,
                                                         long long numel) {
  const float s = fp8d_act_scale(amax);
  if (blockIdx.x == 0 && threadIdx.x == 0) scale[0] = s;
  for (long long i = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x); i < numel;
       i += 4 * (long long)gridDim.x * blockDim.x)
    fp8d_quant_store4(x, x_kind, codes, i, numel, s, true);
}

// Per tensor in one launch: every CTA reads ALL of x (16-byte loads where x is 16-byte aligned) and so
// computes the SAME amax and scale without a second launch, a workspace or atomics (max is exact and
// order-free, NaN-propagating); then each CTA quantizes its grid-stride share and CTA 0 writes the scale.
__device__ __forceinline__ void fp8d_act_quant_tensor_all(const void* __restrict__ x, int x_kind,
                                                          uint8_t* __restrict__ codes, float* __restrict__ scale,
                                                          long long numel) {
  fp8d_act_quant_enter();
  __shared__ float sm[32];
  float amax = 0.0f;
  long long done = 0;
  if ((reinterpret_cast<unsigned long long>(x) & 15ull) == 0ull) {  // uniform: one pointer
    const int per = x_kind == FP8D_DTYPE_F32 ? 4 : 8;
    const long long nvec = numel / per;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
#pragma unroll 4
    for (long long i = threadIdx.x; i < nvec; i += blockDim.x) {
      amax = fp8d_vec_absmax(fp8d_load128_keep(xv + i), x_kind, amax);
    }
    done = nvec * per;
  }
  for (long long i = done + threadIdx.x; i < numel; i += blockDim.x)
    amax = fp8d_nanmax(amax, fabsf(fp8d_load_as_f32(x, i, x_kind)));
  fp8d_quantize_grid_share(fp8d_block_max(amax, sm), x, x_kind, codes, scale, numel);
}

// Per tensor, decode sizes, one CTA (kernels_hip's plan): x is read twice (amax, then codes from L1/L2).
extern "C" __global__ void __launch_bounds__(1024) fp8d_act_quant_tensor_single(const void* __restrict__ x, int x_kind,
                                                                                 uint8_t* __restrict__ codes,
                                                                                 float* __restrict__ scale,
                                                                                 long long numel) {
  fp8d_act_quant_tensor_all(x, x_kind, codes, scale, numel);
}

// Per tensor, decode sizes (M <= 32 GEMV inputs): ONE launch of a few CTAs that each read all of x (at
// <= 64K elements that is <= 256 KB of L2 reads per CTA). One CTA alone (then with 2-byte loads) took
// ~18 us on the H200 at M = 16, K = 4096.
extern "C" __global__ void __launch_bounds__(1024) fp8d_act_quant_tensor_redundant(const void* __restrict__ x,
                                                                                    int x_kind,
                                                                                    uint8_t* __restrict__ codes,
                                                                                    float* __restrict__ scale,
                                                                                    long long numel) {
  fp8d_act_quant_tensor_all(x, x_kind, codes, scale, numel);
}

// Per tensor, larger inputs: pass 1 writes one partial amax per CTA (no atomics, no zero-fill launch) ...
extern "C" __global__ void __launch_bounds__(256) fp8d_act_amax_partial(const void* __restrict__ x, int x_kind,
                                                                         float* __restrict__ partial, long long numel) {
  fp8d_act_quant_enter();
  __shared__ float sm[32];
  float amax = 0.0f;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += (long long)gridDim.x * blockDim.x)
    amax = fp8d_nanmax(amax, fabsf(fp8d_load_as_f32(x, i, x_kind)));
  amax = fp8d_block_max(amax, sm);
  if (threadIdx.x == 0) partial[blockIdx.x] = amax;
}

// ... pass 2: every CTA reduces the partials itself (a few hundred floats) and quantizes its slice.
extern "C" __global__ void __launch_bounds__(256) fp8d_act_quant_tensor_apply(const void* __restrict__ x, int x_kind,
                                                                               const float* __restrict__ partial,
                                                                               int npartial, uint8_t* __restrict__ codes,
                                                                               float* __restrict__ scale, long long numel) {
  fp8d_act_quant_enter();
  __shared__ float sm[32];
  float amax = 0.0f;
  for (int i = threadIdx.x; i < npartial; i += blockDim.x) amax = fp8d_nanmax(amax, partial[i]);
  fp8d_quantize_grid_share(fp8d_block_max(amax, sm), x, x_kind, codes, scale, numel);
}

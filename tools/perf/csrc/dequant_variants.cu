// dequant_variants.cu: candidate bodies of the weight dequantization kernel (dequant.cu), for the same-run probe
// tools/perf/probe_dequant.py ONLY (it compiles this file as if it sat in kernels_cuda/csrc, with those headers);
// no product path loads it. Compiled once per scale layout and variant:
//   -D FP8D_CFG_SCALE=<0..3>   (tensor / row / block128 / mx32, as dequant.cu)
//   -D FP8D_DQ_VARIANT=<1..7>  (the block below; entry fp8d_dequant_v<n>)
// Signature of every entry = dequant.cu's: (w, scale, out, N, K, out_kind). Only K % 16 == 0 is handled (a
// launch with another K returns without writing; the probe refuses such shapes). v1-v4 compute exactly what
// dequant.cu computes (decode to f32, one f32 multiply by the scale, one rounding), so they are bit-identical to
// it and to dispatch.dequantize(qw).to(dtype), as v6 and v7 are; v5 is not (no decode: a memory-pattern ceiling).
// Grids: v1/v2/v5 (K/16/tx, rows, z), v3/v7 (K/8/tx, rows, z), v6 (K/4/tx, rows, z), v4 (SMs x 4) x 256 threads;
// the probe computes them. Session 17 measured them on the H200 (docs/perf/h200_s17_2026-11-30.md) and shipped v7.
#include "fp8_common.cuh"

#ifndef FP8D_CFG_SCALE
#error "compile with -D FP8D_CFG_SCALE (tools/perf/probe_dequant.py)"
#endif
#ifndef FP8D_DQ_VARIANT
#error "compile with -D FP8D_DQ_VARIANT=1..7 (tools/perf/probe_dequant.py)"
#endif

// ---- helpers shared by the variants (32-bit unsigned index math: divisions by the constants are shifts) ----

// The scale of weight (row, k) as loaded (f32 bits, or the e8m0 byte); k is the first code of a chunk, which never
// straddles a block or an MX group. Split from the decode so v4 can keep the load in flight (the e8m0 decode
// branches, and ptxas waits for the byte before anything after the branch, the next codes load included).
__device__ __forceinline__ unsigned dqv_scale_raw(const void* __restrict__ scale, unsigned row, unsigned k, unsigned K) {
  if constexpr (FP8D_CFG_SCALE == FP8D_SCALE_TENSOR) {
    return reinterpret_cast<const unsigned*>(scale)[0];
  } else if constexpr (FP8D_CFG_SCALE == FP8D_SCALE_ROW) {
    return reinterpret_cast<const unsigned*>(scale)[row];
  } else if constexpr (FP8D_CFG_SCALE == FP8D_SCALE_BLOCK) {
    const unsigned kb = (K + FP8D_WEIGHT_BLOCK - 1) / FP8D_WEIGHT_BLOCK;
    return reinterpret_cast<const unsigned*>(scale)[(row / FP8D_WEIGHT_BLOCK) * kb + k / FP8D_WEIGHT_BLOCK];
  } else {
    const unsigned kg = (K + FP8D_MX_GROUP - 1) / FP8D_MX_GROUP;
    return reinterpret_cast<const uint8_t*>(scale)[(unsigned long long)row * kg + k / FP8D_MX_GROUP];
  }
}
__device__ __forceinline__ float dqv_scale_f32(unsigned raw) {
  if constexpr (FP8D_CFG_SCALE == FP8D_SCALE_MX) return fp8d_e8m0_to_f32(raw);
  else return __uint_as_float(raw);
}
// Loaded and decoded at once: the order of dequant.cu (for mx32, the codes load issues after the scale arrived).
__device__ __forceinline__ float dqv_scale(const void* __restrict__ scale, unsigned row, unsigned k, unsigned K) {
  return dqv_scale_f32(dqv_scale_raw(scale, row, k, K));
}

// = dequant.cu's fp8d_pack2 (two f32 -> two 16-bit words, RNE).
__device__ __forceinline__ unsigned dqv_pack2(float a, float b, int out_kind) {
  if (out_kind == FP8D_DTYPE_BF16) return (unsigned)fp8d_f32_to_bf16_bits(a) | ((unsigned)fp8d_f32_to_bf16_bits(b) << 16);
  return (unsigned)fp8d_f32_to_f16_bits(a) | ((unsigned)fp8d_f32_to_f16_bits(b) << 16);
}

// Four codes (one word) -> two output words, dequant.cu's arithmetic: exact decode, f32 multiply, one rounding.
__device__ __forceinline__ void dqv_convert4(unsigned codes, float sc, int out_kind, unsigned& lo, unsigned& hi) {
  float f[4];
  fp8d_decode4(codes, f);
  lo = dqv_pack2(f[0] * sc, f[1] * sc, out_kind);
  hi = dqv_pack2(f[2] * sc, f[3] * sc, out_kind);
}

__device__ __forceinline__ void dqv_convert16(const uint4& c, float sc, int out_kind, unsigned o[8]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) dqv_convert4(fp8d_word(c, j), sc, out_kind, o[2 * j], o[2 * j + 1]);
}

__device__ __forceinline__ void dqv_store16(void* out, unsigned long long i0, const unsigned o[8]) {
  uint4* dst = reinterpret_cast<uint4*>(reinterpret_cast<uint16_t*>(out) + i0);
  dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
  dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
}

// Row of this thread in the 2-D geometry: rows over (z, y) because gridDim.y <= 65535 (N = 128256 needs 2 z).
__device__ __forceinline__ unsigned dqv_row() {
  return (blockIdx.z * gridDim.y + blockIdx.y) * blockDim.y + threadIdx.y;
}

#if FP8D_DQ_VARIANT == 1
// v1: the shipped body without its 64-bit i0 / K and i0 % K. The row comes from the grid, the chunk of the row
// from x; the scale is loaded before the codes (the order of session 6's kernel, which measured a little faster).
extern "C" __global__ void __launch_bounds__(256) fp8d_dequant_v1(const uint8_t* __restrict__ w, const void* __restrict__ scale,
                                                                  void* __restrict__ out, int N, int K, int out_kind) {
  const unsigned row = dqv_row(), chunk = blockIdx.x * blockDim.x + threadIdx.x;
  if ((K & 15) != 0 || row >= (unsigned)N || chunk >= ((unsigned)K >> 4)) return;
  const unsigned k = chunk << 4;
  const float sc = dqv_scale(scale, row, k, (unsigned)K);
  const unsigned long long i0 = (unsigned long long)row * (unsigned)K + k;
  const uint4 c = fp8d_load128(w + i0);
  unsigned o[8];
  dqv_convert16(c, sc, out_kind, o);
  dqv_store16(out, i0, o);
}

#elif FP8D_DQ_VARIANT == 2
// v2: v1 with every stream marked evict-first: st.global.cs for the bf16 output (written once, never re-read
// here) and the codes' non-coherent no-L1 load with an L2 evict-first hint. Does L2 residency of the streams
// (dirty output lines competing with the next reads) cost bandwidth?
// (a plain .L2::evict_first qualifier needs 256-bit loads on this PTX; the 128-bit form takes a cache policy)
__device__ __forceinline__ uint4 dqv_load128_stream(const void* p) {
  uint4 r;
  asm volatile("{\n\t.reg .b64 pol;\n\t"
               "createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
               "ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], pol;\n\t}"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
__device__ __forceinline__ void dqv_store128_cs(void* p, unsigned a, unsigned b, unsigned c, unsigned d) {
  asm volatile("st.global.cs.v4.b32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
extern "C" __global__ void __launch_bounds__(256) fp8d_dequant_v2(const uint8_t* __restrict__ w, const void* __restrict__ scale,
                                                                  void* __restrict__ out, int N, int K, int out_kind) {
  const unsigned row = dqv_row(), chunk = blockIdx.x * blockDim.x + threadIdx.x;
  if ((K & 15) != 0 || row >= (unsigned)N || chunk >= ((unsigned)K >> 4)) return;
  const unsigned k = chunk << 4;
  const float sc = dqv_scale(scale, row, k, (unsigned)K);
  const unsigned long long i0 = (unsigned long long)row * (unsigned)K + k;
  const uint4 c = dqv_load128_stream(w + i0);
  unsigned o[8];
  dqv_convert16(c, sc, out_kind, o);
  uint16_t* dst = reinterpret_cast<uint16_t*>(out) + i0;
  dqv_store128_cs(dst, o[0], o[1], o[2], o[3]);
  dqv_store128_cs(dst + 8, o[4], o[5], o[6], o[7]);
}

#elif FP8D_DQ_VARIANT == 3
// v3: v1 geometry at 8 codes per thread (one 8-byte load, one 16-byte store): twice the threads, half the
// registers and work per thread. More, smaller requests in flight instead of fewer, larger ones.
__device__ __forceinline__ uint2 dqv_load64(const void* p) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
  return r;
}
extern "C" __global__ void __launch_bounds__(256) fp8d_dequant_v3(const uint8_t* __restrict__ w, const void* __restrict__ scale,
                                                                  void* __restrict__ out, int N, int K, int out_kind) {
  const unsigned row = dqv_row(), chunk = blockIdx.x * blockDim.x + threadIdx.x;
  if ((K & 15) != 0 || row >= (unsigned)N || chunk >= ((unsigned)K >> 3)) return;
  const unsigned k = chunk << 3;  // 8 codes never straddle a block or an MX group either
  const float sc = dqv_scale(scale, row, k, (unsigned)K);
  const unsigned long long i0 = (unsigned long long)row * (unsigned)K + k;
  const uint2 c = dqv_load64(w + i0);
  unsigned o[4];
  dqv_convert4(c.x, sc, out_kind, o[0], o[1]);
  dqv_convert4(c.y, sc, out_kind, o[2], o[3]);
  *reinterpret_cast<uint4*>(reinterpret_cast<uint16_t*>(out) + i0) = make_uint4(o[0], o[1], o[2], o[3]);
}

#elif FP8D_DQ_VARIANT == 4
// v4: persistent grid-stride loop (grid = SMs x 4 CTAs of 256) with a 2-deep register pipeline: the NEXT
// chunk's codes and scale are loaded before the current chunk is converted and stored, so each thread keeps a
// load in flight while it works, and no CTA launch / tail wave per 4 KB. 32-bit index math: needs N * K < 2^31
// (the probe checks); one 32-bit division per thread, then (row, k) advance by the stride's (rows, codes).
extern "C" __global__ void __launch_bounds__(256) fp8d_dequant_v4(const uint8_t* __restrict__ w, const void* __restrict__ scale,
                                                                  void* __restrict__ out, int N, int K, int out_kind) {
  if ((K & 15) != 0) return;
  const unsigned uK = (unsigned)K;
  const unsigned total = (unsigned)N * (uK >> 4);  // chunks
  const unsigned stride = gridDim.x * blockDim.x;  // chunks
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const unsigned s16 = stride << 4, srow = s16 / uK, sk = s16 - srow * uK;  // the stride as (rows, codes)
  unsigned row = (i << 4) / uK, k = (i << 4) - row * uK;
  unsigned sc = dqv_scale_raw(scale, row, k, uK);  // raw bits: decoded when used, so no load waits on another
  uint4 c = fp8d_load128(w + (i << 4));
  for (;;) {
    const unsigned in = i + stride;
    unsigned rown = row + srow, kn = k + sk;
    if (kn >= uK) { kn -= uK; ++rown; }
    const bool more = in < total;
    unsigned scn = 0u;
    uint4 cn = make_uint4(0u, 0u, 0u, 0u);
    if (more) {  // issue the next chunk's loads before this chunk's conversion
      scn = dqv_scale_raw(scale, rown, kn, uK);
      cn = fp8d_load128(w + (in << 4));
    }
    unsigned o[8];
    dqv_convert16(c, dqv_scale_f32(sc), out_kind, o);
    dqv_store16(out, i << 4, o);
    if (!more) break;
    i = in; row = rown; k = kn; sc = scn; c = cn;
  }
}

#elif FP8D_DQ_VARIANT == 5
// v5 (NOT a dequantization; no identity check): the v1 geometry and loads (scale + 16 codes), then each code
// byte zero-extended to 16 bits and stored: the same bytes read and written as v1 with no decode. If this
// also stays under the copy rate, the 1:2 read:write mix itself (not the conversion) is the limit.
extern "C" __global__ void __launch_bounds__(256) fp8d_dequant_v5(const uint8_t* __restrict__ w, const void* __restrict__ scale,
                                                                  void* __restrict__ out, int N, int K, int out_kind) {
  const unsigned row = dqv_row(), chunk = blockIdx.x * blockDim.x + threadIdx.x;
  if ((K & 15) != 0 || row >= (unsigned)N || chunk >= ((unsigned)K >> 4)) return;
  const unsigned k = chunk << 4;
  const unsigned raw = dqv_scale_raw(scale, row, k, (unsigned)K);
  const unsigned long long i0 = (unsigned long long)row * (unsigned)K + k;
  const uint4 c = fp8d_load128(w + i0);
  unsigned o[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const unsigned v = fp8d_word(c, j);
    o[2 * j] = fp8d_byte_perm(v, 0u, 0x4140u);      // [b0, 0, b1, 0]
    o[2 * j + 1] = fp8d_byte_perm(v, 0u, 0x4342u);  // [b2, 0, b3, 0]
  }
  o[0] ^= raw;  // the stores depend on the scale load, as in the real kernel (ptxas drops an unused load)
  dqv_store16(out, i0, o);
}

#elif FP8D_DQ_VARIANT == 6
// v6: v3's trend taken further (session 17's first probe: 8 codes a thread beat 16 on 24 of 32 cells): 4 codes per
// thread, one 4-byte load and one 8-byte store.
extern "C" __global__ void __launch_bounds__(256) fp8d_dequant_v6(const uint8_t* __restrict__ w, const void* __restrict__ scale,
                                                                  void* __restrict__ out, int N, int K, int out_kind) {
  const unsigned row = dqv_row(), chunk = blockIdx.x * blockDim.x + threadIdx.x;
  if ((K & 15) != 0 || row >= (unsigned)N || chunk >= ((unsigned)K >> 2)) return;
  const unsigned k = chunk << 2;
  const float sc = dqv_scale(scale, row, k, (unsigned)K);
  const unsigned long long i0 = (unsigned long long)row * (unsigned)K + k;
  unsigned c;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(c) : "l"(w + i0));
  unsigned lo, hi;
  dqv_convert4(c, sc, out_kind, lo, hi);
  *reinterpret_cast<uint2*>(reinterpret_cast<uint16_t*>(out) + i0) = make_uint2(lo, hi);
}

#elif FP8D_DQ_VARIANT == 7
// v7: v3 (8 codes a thread) with the output stored streaming (st.global.cs: evict-first, written once).
__device__ __forceinline__ uint2 dqv_load64(const void* p) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
  return r;
}
extern "C" __global__ void __launch_bounds__(256) fp8d_dequant_v7(const uint8_t* __restrict__ w, const void* __restrict__ scale,
                                                                  void* __restrict__ out, int N, int K, int out_kind) {
  const unsigned row = dqv_row(), chunk = blockIdx.x * blockDim.x + threadIdx.x;
  if ((K & 15) != 0 || row >= (unsigned)N || chunk >= ((unsigned)K >> 3)) return;
  const unsigned k = chunk << 3;
  const float sc = dqv_scale(scale, row, k, (unsigned)K);
  const unsigned long long i0 = (unsigned long long)row * (unsigned)K + k;
  const uint2 c = dqv_load64(w + i0);
  unsigned o[4];
  dqv_convert4(c.x, sc, out_kind, o[0], o[1]);
  dqv_convert4(c.y, sc, out_kind, o[2], o[3]);
  asm volatile("st.global.cs.v4.b32 [%0], {%1,%2,%3,%4};" ::"l"(reinterpret_cast<uint16_t*>(out) + i0), "r"(o[0]),
               "r"(o[1]), "r"(o[2]), "r"(o[3]) : "memory");
}

#else
#error "FP8D_DQ_VARIANT must be 1..7"
#endif

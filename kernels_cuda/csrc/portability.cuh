// portability.cuh: the vendor layer under every fp8dispatch kernel source (CUDA via NVRTC, HIP via hipRTC /
// clang -x hip). Kernel sources call ONLY the names below for anything a vendor spells differently.
//
// ---- Contract (the HIP side implements the vendor part in kernels_hip/csrc/gfx12_fp8.h) ----------------
//   FP8D_WARP_SIZE                              lanes per warp / wave (32: CUDA warp, RDNA4 wave32)
//   FP8D_HW_CVT                                 1 when fp8d_decode4/fp8d_encode4 are hardware instructions
//   FP8D_HAS_FP8_MMA                            1 when fp8d_mma_e4m3_m16n8k32 is a native instruction
//   float    fp8d_shfl_xor(float v, int mask)   butterfly shuffle
//   unsigned fp8d_shfl_idx(unsigned v, int src) read `v` of lane `src`            (HIP: ds_bpermute)
//   float    fp8d_warp_sum(float), fp8d_warp_max(float) (NaN-propagating), fp8d_nanmax(float, float)
//   bool     fp8d_cta_any(bool p)               p on any thread of the CTA (a barrier; CTA-uniform result)
//   void     fp8d_decode4(unsigned codes, float out[4])   byte i of `codes` -> out[i], exact, NaN kept
//   float    fp8d_decode1(unsigned code)                  low byte -> float
//   unsigned fp8d_encode4(float a, float b, float c, float d)  e4m3 RNE of already-clamped values,
//                                                         element i -> byte i, NaN -> NaN
//   unsigned short fp8d_f32_to_bf16_bits(float)  RNE     float fp8d_bf16_bits_to_f32(unsigned short)
//   unsigned short fp8d_f32_to_f16_bits(float)   RNE     float fp8d_f16_bits_to_f32(unsigned short)
//   uint4    fp8d_load128(const void* p)        16-byte read-only global load, streamed (read once)
//   uint4    fp8d_load128_keep(const void* p)   16-byte read-only global load, cached (re-read data: x)
//   uint4    fp8d_load128_rows(const void* p)   fp8d_load128 for a row-major weight (CUDA: with an L2 prefetch hint)
//   Matrix fragments (mma.sync layouts of PTX, "m16n8k16 row.col" / "m16n8k32 row.col"; lane = 4*g + t):
//     A (16 x K, row-major): a[0] row g, a[1] row g+8, a[2] row g (upper K half), a[3] row g+8 (upper K half)
//     B (K x 8):  b[0] column g lower K half, b[1] column g upper K half
//     C (16 x 8, f32): c[0..1] row g columns 2t, 2t+1; c[2..3] row g+8 columns 2t, 2t+1
//   void fp8d_mma_bf16_m16n8k16(float c[4], const unsigned a[4], const unsigned b[2])  bf16x2 words
//   void fp8d_mma_f16_m16n8k16(float c[4], const unsigned a[4], const unsigned b[2])   f16x2 words
//   void fp8d_mma_e4m3_m16n8k32(float c[4], const unsigned a[4], const unsigned b[2])  4 codes per word
//   On CUDA they are mma.sync; elsewhere (or with -DFP8D_FORCE_MMA_EMULATION, which the GPU tests run on the
//   H200 so the fallback is validated) they are emulated below with fp8d_shfl_idx + fp32 FMAs: correct
//   for any 32-lane target, slow. A vendor header may define FP8D_VENDOR_MMA 1 and provide its own.
//
// Format constants (FP8D_E4M3_MAX, FP8D_AMAX_FLOOR, FP8D_WEIGHT_BLOCK, FP8D_ACT_GROUP, FP8D_MX_GROUP,
// FP8D_E8M0_BIAS) are never written here: kernels_cuda/compiler.py passes them as -D from
// dispatch/formats.py (the one table); fp8_common.cuh refuses to compile without them.
#pragma once

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
// ------------------------------------------------------------------------------------------- AMD
#include "../../kernels_hip/csrc/gfx12_fp8.h"
#define FP8D_IS_CUDA 0
#ifndef FP8D_HW_CVT
#define FP8D_HW_CVT 1
#endif
#ifndef FP8D_HAS_FP8_MMA
#define FP8D_HAS_FP8_MMA 0
#endif
#ifndef FP8D_VENDOR_MMA
#define FP8D_VENDOR_MMA 0
#endif
#ifndef FP8D_HAVE_LOAD128
__device__ __forceinline__ uint4 fp8d_load128(const void* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ uint4 fp8d_load128_keep(const void* p) { return *reinterpret_cast<const uint4*>(p); }
#endif
__device__ __forceinline__ uint4 fp8d_load128_rows(const void* p) { return fp8d_load128(p); }

#else
// ------------------------------------------------------------------------------------------- CUDA
// NVRTC here runs without the CUDA include tree (the nvidia-cuda-nvrtc wheel ships none), so nothing
// below includes a header: the integer types, bf16/f16 and fp8 conversions are spelled in PTX.
#define FP8D_IS_CUDA 1
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned short uint16_t;
typedef unsigned char uint8_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;

#define FP8D_WARP_SIZE 32

// sm_89 introduced the e4m3 <-> f16x2 / f32 conversion instructions (F2FP) and the m16n8k32 e4m3 mma;
// sm_80 has neither. FP8D_FORCE_SW_CVT lets the GPU tests run the sm_80 code on newer parts.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890) && !defined(FP8D_FORCE_SW_CVT)
#define FP8D_HW_CVT 1
#define FP8D_HAS_FP8_MMA 1
#else
#define FP8D_HW_CVT 0
#define FP8D_HAS_FP8_MMA 0
#endif
#define FP8D_VENDOR_MMA 1

__device__ __forceinline__ float fp8d_shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ unsigned fp8d_shfl_idx(unsigned v, int src) { return __shfl_sync(0xffffffffu, v, src); }

// NaN-propagating max (fmaxf would drop a NaN; activation scales must turn NaN when x has one).
__device__ __forceinline__ float fp8d_nanmax(float a, float b) { return (a > b || a != a) ? a : b; }

__device__ __forceinline__ float fp8d_warp_sum(float v) {
#pragma unroll
  for (int m = FP8D_WARP_SIZE / 2; m > 0; m >>= 1) v += fp8d_shfl_xor(v, m);
  return v;
}
__device__ __forceinline__ float fp8d_warp_max(float v) {
#pragma unroll
  for (int m = FP8D_WARP_SIZE / 2; m > 0; m >>= 1) v = fp8d_nanmax(v, fp8d_shfl_xor(v, m));
  return v;
}
// Does any thread of the CTA hold p? A barrier: every thread of the CTA must call it.
__device__ __forceinline__ bool fp8d_cta_any(bool p) { return __syncthreads_or(p); }

// The weights are read once per call: the non-coherent path (LDG.E.128.CONSTANT) with no L1 allocation.
__device__ __forceinline__ uint4 fp8d_load128(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
// The same load for a row-major weight, whose load instructions read 64 bytes of each of eight rows
// (skinny_common.cuh): with an L2 prefetch-size hint (SASS LDG.E.NA.LTC128B), L2 fetches each row's whole 128-byte
// line at the first miss. Session 24 (tools/perf/probe_l2_hint.py, 64 decode cells on the H200): 128 B 0.984x the
// time (median; faster in 52), 256 B 0.991x; on the decode tiles (512 contiguous bytes) it slowed them, so they keep
// fp8d_load128. FP8D_WEIGHT_L2_PREFETCH (0, 64, 128 or 256) overrides the size for that probe; 0 is no hint.
#ifndef FP8D_WEIGHT_L2_PREFETCH
#define FP8D_WEIGHT_L2_PREFETCH 128
#endif
#if FP8D_WEIGHT_L2_PREFETCH == 256
#define FP8D_ROWS_LD "ld.global.nc.L1::no_allocate.L2::256B.v4.u32"
#elif FP8D_WEIGHT_L2_PREFETCH == 128
#define FP8D_ROWS_LD "ld.global.nc.L1::no_allocate.L2::128B.v4.u32"
#elif FP8D_WEIGHT_L2_PREFETCH == 64
#define FP8D_ROWS_LD "ld.global.nc.L1::no_allocate.L2::64B.v4.u32"
#elif FP8D_WEIGHT_L2_PREFETCH == 0
#define FP8D_ROWS_LD "ld.global.nc.L1::no_allocate.v4.u32"
#else
#error "FP8D_WEIGHT_L2_PREFETCH must be 0, 64, 128 or 256"
#endif
__device__ __forceinline__ uint4 fp8d_load128_rows(const void* p) {
  uint4 r;
  asm volatile(FP8D_ROWS_LD " {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
// Activations are re-read by every CTA: keep them in L1.
__device__ __forceinline__ uint4 fp8d_load128_keep(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

#if defined(FP8D_SMEM_RING) && FP8D_SMEM_RING
// Asynchronous 16-byte copies global -> shared (sm_80+: LDGSTS), for the GEMVs' shared-memory weight ring
// (skinny_common.cuh, FP8D_SMEM_RING: GemvConfig.smem_ring): the bytes in flight no longer cost registers. `ok` false
// copies nothing and zero-fills the 16 bytes (src-size 0). The thread that issues a copy is the only one that reads
// it back, after fp8d_cp_async_wait, so no barrier is needed.
__device__ __forceinline__ void fp8d_cp_async16(void* smem, const void* src, bool ok) {
  unsigned dst;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(dst) : "l"(smem));
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void fp8d_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void fp8d_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
#endif

__device__ __forceinline__ float fp8d_bf16_bits_to_f32(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
__device__ __forceinline__ unsigned short fp8d_f32_to_bf16_bits(float f) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float fp8d_f16_bits_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short fp8d_f32_to_f16_bits(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

#if FP8D_HW_CVT
// Two e4m3 codes (low byte = first) -> f16x2 (low half = first): one F2FP. Exact (e4m3 is a subset of f16).
__device__ __forceinline__ unsigned fp8d_hw_e4m3x2_to_f16x2(unsigned short codes) {
  unsigned r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(codes));
  return r;
}
#endif
#endif  // vendor

// ------------------------------------------------------------------------------------------- portable
// Software e4m3 decoders. They place the 7 magnitude bits of the code into the exponent/mantissa fields
// of a wider type and fix the exponent bias with one exact power-of-two multiply: subnormal codes land
// on subnormals of the wider type, so the multiply (which keeps subnormals: no -ftz) is exact too.
// The packed 16-bit variants do NOT map the NaN codes 0x7f/0xff to NaN (they read as +-480): weights
// never hold NaN (dispatch.quantize rejects NaN/Inf), and the fp32 decoder below does handle NaN.

// bf16 pairs: code<<8 in each 16-bit half, then (bits & 0x7f00) >> 4 puts eeee.mmm at bf16 bits 10..4,
// i.e. the value times 2^-120; an fma with 2^120 (bf16 0x7b80) and -0 restores it exactly.
__device__ __forceinline__ unsigned fp8d_sw_spread_bf16(unsigned t) {
  return ((t & 0x7f007f00u) >> 4) | (t & 0x80008000u);
}
__device__ __forceinline__ unsigned fp8d_sw_spread_f16(unsigned t) {  // value times 2^-8, fixed by 2^8 (0x5c00)
  return ((t & 0x7f007f00u) >> 1) | (t & 0x80008000u);
}

#if FP8D_IS_CUDA
__device__ __forceinline__ unsigned fp8d_bf16x2_fma(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ unsigned fp8d_f16x2_fma(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ unsigned fp8d_byte_perm(unsigned a, unsigned b, unsigned s) { return __byte_perm(a, b, s); }
#else
__device__ __forceinline__ unsigned fp8d_bf16x2_fma(unsigned a, unsigned b, unsigned c) {
  // Through f32: a*b of two bf16 is exact in f32, so fma then one rounding equals the bf16 fma.
  const float lo = __builtin_fmaf(fp8d_bf16_bits_to_f32((unsigned short)a), fp8d_bf16_bits_to_f32((unsigned short)b),
                                  fp8d_bf16_bits_to_f32((unsigned short)c));
  const float hi = __builtin_fmaf(fp8d_bf16_bits_to_f32((unsigned short)(a >> 16)),
                                  fp8d_bf16_bits_to_f32((unsigned short)(b >> 16)),
                                  fp8d_bf16_bits_to_f32((unsigned short)(c >> 16)));
  return (unsigned)fp8d_f32_to_bf16_bits(lo) | ((unsigned)fp8d_f32_to_bf16_bits(hi) << 16);
}
__device__ __forceinline__ unsigned fp8d_f16x2_fma(unsigned a, unsigned b, unsigned c) {
  const float lo = __builtin_fmaf(fp8d_f16_bits_to_f32((unsigned short)a), fp8d_f16_bits_to_f32((unsigned short)b),
                                  fp8d_f16_bits_to_f32((unsigned short)c));
  const float hi = __builtin_fmaf(fp8d_f16_bits_to_f32((unsigned short)(a >> 16)),
                                  fp8d_f16_bits_to_f32((unsigned short)(b >> 16)),
                                  fp8d_f16_bits_to_f32((unsigned short)(c >> 16)));
  return (unsigned)fp8d_f32_to_f16_bits(lo) | ((unsigned)fp8d_f32_to_f16_bits(hi) << 16);
}
__device__ __forceinline__ unsigned fp8d_byte_perm(unsigned a, unsigned b, unsigned s) {
  const unsigned long long v = ((unsigned long long)b << 32) | a;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return r;
}
#endif

// Four codes -> two bf16x2 words: lo = (e0, e1), hi = (e2, e3). Exact for every non-NaN code. `mul` is the
// bf16x2 multiplier that restores the spread value (value x 2^-120): 2^120 by default; a power of two 2^(120+e)
// yields value x 2^e with the one rounding of that product (fp8_common.cuh fp8d_mx_decode_mul: MX scales).
__device__ __forceinline__ void fp8d_decode4_bf16x2(unsigned codes, unsigned& lo, unsigned& hi,
                                                    unsigned mul = 0x7b807b80u) {
  const unsigned t0 = fp8d_byte_perm(codes, 0u, 0x1404u);  // bytes [0, e0, 0, e1]
  const unsigned t1 = fp8d_byte_perm(codes, 0u, 0x3424u);  // bytes [0, e2, 0, e3]
  lo = fp8d_bf16x2_fma(fp8d_sw_spread_bf16(t0), mul, 0x80008000u);
  hi = fp8d_bf16x2_fma(fp8d_sw_spread_bf16(t1), mul, 0x80008000u);
}

// Four codes -> two f16x2 words (hardware F2FP where it exists).
__device__ __forceinline__ void fp8d_decode4_f16x2(unsigned codes, unsigned& lo, unsigned& hi) {
#if FP8D_IS_CUDA && FP8D_HW_CVT
  lo = fp8d_hw_e4m3x2_to_f16x2((unsigned short)(codes & 0xffffu));
  hi = fp8d_hw_e4m3x2_to_f16x2((unsigned short)(codes >> 16));
#else
  const unsigned t0 = fp8d_byte_perm(codes, 0u, 0x1404u);
  const unsigned t1 = fp8d_byte_perm(codes, 0u, 0x3424u);
  lo = fp8d_f16x2_fma(fp8d_sw_spread_f16(t0), 0x5c005c00u, 0x80008000u);
  hi = fp8d_f16x2_fma(fp8d_sw_spread_f16(t1), 0x5c005c00u, 0x80008000u);
#endif
}

// One code -> f32, in software: magnitude bits at f32 bits 26..20 (value times 2^-120), times 2^120.
__device__ __forceinline__ float fp8d_sw_decode1(unsigned code) {
  const unsigned mag = code & 0x7fu;
  const float v = __uint_as_float(mag << 20) * 1.329227995784916e36f;  // 2^120, exact
  const float nan = __uint_as_float(0x7fc00000u);
  const float r = (mag == 0x7fu) ? nan : v;
  return (code & 0x80u) ? -r : r;
}

// f32 -> e4m3 code, round-to-nearest-even, for |v| <= 448 or NaN (callers clamp first). Bit-identical to
// torch's .to(float8_e4m3fn) on that domain: subnormals (|v| < 2^-6) round on the 2^-9 grid, normals
// round the f32 mantissa to 3 bits (a carry into the exponent is the right next code).
__device__ __forceinline__ unsigned fp8d_sw_encode1(float v) {
  const unsigned u = __float_as_uint(v);
  const unsigned sign = (u >> 24) & 0x80u;
  const unsigned a = u & 0x7fffffffu;
  unsigned code;
  if (a > 0x7f800000u) {
    code = 0x7fu;  // NaN
  } else if (a < 0x3c800000u) {  // < 2^-6: e4m3 subnormal range, quantum 2^-9
    code = (unsigned)__float2int_rn(__uint_as_float(a) * 512.0f);  // exact scaling, then RNE to an integer
  } else {
    const unsigned r = a + 0x7ffffu + ((a >> 20) & 1u);  // RNE at bit 20
    code = (r >> 20) - (120u << 3);                      // rebias exponent 127 -> 7
  }
  return code | sign;
}

#if FP8D_IS_CUDA
__device__ __forceinline__ float fp8d_decode1(unsigned code) {
#if FP8D_HW_CVT
  return fp8d_f16_bits_to_f32((unsigned short)(fp8d_hw_e4m3x2_to_f16x2((unsigned short)(code & 0xffu)) & 0xffffu));
#else
  return fp8d_sw_decode1(code & 0xffu);
#endif
}

__device__ __forceinline__ void fp8d_decode4(unsigned codes, float out[4]) {
#if FP8D_HW_CVT
  const unsigned lo = fp8d_hw_e4m3x2_to_f16x2((unsigned short)(codes & 0xffffu));
  const unsigned hi = fp8d_hw_e4m3x2_to_f16x2((unsigned short)(codes >> 16));
  out[0] = fp8d_f16_bits_to_f32((unsigned short)(lo & 0xffffu));
  out[1] = fp8d_f16_bits_to_f32((unsigned short)(lo >> 16));
  out[2] = fp8d_f16_bits_to_f32((unsigned short)(hi & 0xffffu));
  out[3] = fp8d_f16_bits_to_f32((unsigned short)(hi >> 16));
#else
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = fp8d_sw_decode1((codes >> (8 * i)) & 0xffu);
#endif
}

__device__ __forceinline__ unsigned fp8d_encode4(float a, float b, float c, float d) {
#if FP8D_HW_CVT
  // cvt.rn.satfinite.e4m3x2.f32 d, hi, lo: the first source goes to the upper byte.
  unsigned short p0, p1;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(p0) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(p1) : "f"(d), "f"(c));
  return (unsigned)p0 | ((unsigned)p1 << 16);
#else
  return fp8d_sw_encode1(a) | (fp8d_sw_encode1(b) << 8) | (fp8d_sw_encode1(c) << 16) | (fp8d_sw_encode1(d) << 24);
#endif
}
#endif

// ------------------------------------------------------------------------------------------- matrix ops
#if FP8D_IS_CUDA && !defined(FP8D_FORCE_MMA_EMULATION)
__device__ __forceinline__ void fp8d_mma_bf16_m16n8k16(float c[4], const unsigned a[4], const unsigned b[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void fp8d_mma_f16_m16n8k16(float c[4], const unsigned a[4], const unsigned b[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#if FP8D_HAS_FP8_MMA
__device__ __forceinline__ void fp8d_mma_e4m3_m16n8k32(float c[4], const unsigned a[4], const unsigned b[2]) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif
#elif !FP8D_VENDOR_MMA || defined(FP8D_FORCE_MMA_EMULATION)
// Emulation of the fragment contract above: lane (g, t) gathers row g / g+8 of A and columns 2t, 2t+1 of
// B from the four lanes that hold each K slice, and accumulates in fp32.
template <int KPW>  // values per 32-bit word: 2 (bf16/f16) or 4 (e4m3)
struct Fp8dUnpack;
template <>
struct Fp8dUnpack<2> {
  __device__ __forceinline__ static void bf16(unsigned w, float* o) {
    o[0] = fp8d_bf16_bits_to_f32((unsigned short)(w & 0xffffu));
    o[1] = fp8d_bf16_bits_to_f32((unsigned short)(w >> 16));
  }
  __device__ __forceinline__ static void f16(unsigned w, float* o) {
    o[0] = fp8d_f16_bits_to_f32((unsigned short)(w & 0xffffu));
    o[1] = fp8d_f16_bits_to_f32((unsigned short)(w >> 16));
  }
};

template <int KIND>  // 0 bf16, 1 f16, 2 e4m3
__device__ __forceinline__ void fp8d_unpack_word(unsigned w, float* o) {
  if constexpr (KIND == 0) Fp8dUnpack<2>::bf16(w, o);
  else if constexpr (KIND == 1) Fp8dUnpack<2>::f16(w, o);
  else fp8d_decode4(w, o);
}

template <int KIND>
__device__ __forceinline__ void fp8d_mma_emulated(float c[4], const unsigned a[4], const unsigned b[2]) {
  constexpr int KPW = (KIND == 2) ? 4 : 2;
  const int lane = (int)(threadIdx.x % FP8D_WARP_SIZE);
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int tp = 0; tp < 4; ++tp) {
    const int src_a = g * 4 + tp;
    unsigned aw[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) aw[i] = fp8d_shfl_idx(a[i], src_a);
    float av[4][KPW];
#pragma unroll
    for (int i = 0; i < 4; ++i) fp8d_unpack_word<KIND>(aw[i], av[i]);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int src_b = (2 * t + j) * 4 + tp;
      float bv[2][KPW];
      fp8d_unpack_word<KIND>(fp8d_shfl_idx(b[0], src_b), bv[0]);
      fp8d_unpack_word<KIND>(fp8d_shfl_idx(b[1], src_b), bv[1]);
#pragma unroll
      for (int e = 0; e < KPW; ++e) {
        c[j] += av[0][e] * bv[0][e] + av[2][e] * bv[1][e];
        c[2 + j] += av[1][e] * bv[0][e] + av[3][e] * bv[1][e];
      }
    }
  }
}
__device__ __forceinline__ void fp8d_mma_bf16_m16n8k16(float c[4], const unsigned a[4], const unsigned b[2]) {
  fp8d_mma_emulated<0>(c, a, b);
}
__device__ __forceinline__ void fp8d_mma_f16_m16n8k16(float c[4], const unsigned a[4], const unsigned b[2]) {
  fp8d_mma_emulated<1>(c, a, b);
}
__device__ __forceinline__ void fp8d_mma_e4m3_m16n8k32(float c[4], const unsigned a[4], const unsigned b[2]) {
  fp8d_mma_emulated<2>(c, a, b);
}
#endif

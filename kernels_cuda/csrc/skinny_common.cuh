// skinny_common.cuh: the decode-GEMV driver both families (W8A16 gemv_w8a16.cu, W8A8 gemv_w8a8.cu) run;
// a family only supplies a policy: its per-step operands, its MMAs and its scales.
//
// Geometry (why it looks like this): at M <= 32 the weight stream is the whole cost, so every lane issues
// 16-byte loads along K and a CTA splits K across its warps (blockDim.x / 32 of them, interleaved by
// 128-wide steps) to put enough bytes in flight even when N is small (N = 4096 -> 256 CTAs of 8 warps).
// The tokens are the "n" side of an m16n8 MMA: a warp owns MT 16-row tiles of W and NT 8-token tiles of x.
// K is permuted consistently in A and B: in each 128-step, lane t of a quad owns the 16-byte chunks
// [64 q + 16 t, 64 q + 16 t + 16), q = 0, 1, so one load instruction of a quad reads 64 contiguous bytes
// of a row (two whole 32-byte sectors; a lane-contiguous 32-byte chunk would touch each sector twice).
//
// Latency (why the loop is a ring): a warp keeps DEPTH K-steps of weight loads in flight (a ring of
// registers indexed at compile time), so DRAM latency is not paid once per step; at K = 4096 with 8 warps
// a warp owns 4 steps and DEPTH = 4 issues all of them before the first MMA. The step's other operands
// (x, block / MX scales: L1/L2 hits) are loaded one step ahead where the registers allow it (kPrefetch
// below), else half a step (one 16-byte chunk per lane) at a time just before its MMAs, which keeps the
// 32-token tiles within the budget. Output scales and bias are loaded before the main loop (read after the
// reduction, so their latency hides behind the loop) except in the 4-accumulator-tile configs, which have
// no registers to spare. Register budget: 128 per thread (__launch_bounds__(256, 2)); configs.py
// GemvConfig.fits() lists the (tiles, DEPTH) pairs that compile without spills.
//
// The K-split partial sums are reduced through shared memory in warp order: deterministic.
//
// Programmatic dependent launch (sm_90, kernels_cuda._launch.pdl_allowed): before fp8d_wait_prior_grid()
// the kernel reads only the weight codes; x, x scales, weight scales and bias are read after it, and y is
// written after it. Every CTA lets the next programmatic launch start right after issuing its first weight
// loads, so the next GEMV's CTAs fill the SMs this grid's last wave leaves idle and start their own weight
// stream (they wait for this grid before reading its y). Launched plainly, both calls return at once.
#pragma once
#include "fp8_common.cuh"

// Offset inside a 128-wide K step of lane t's q-th 16-byte chunk (see the geometry note above).
__device__ __forceinline__ int fp8d_chunk_k(int t, int q) { return q * 64 + t * 16; }

// One K step of one lane's weights: [16-row tile][h: row g or g + 8][q: 16-byte chunk].
template <int MT>
struct Fp8dWeightStep {
  uint4 v[MT][2][2];
};

template <int N>
__device__ __forceinline__ void fp8d_zero(float* a) {
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = 0.0f;
}

// Lane coordinates shared by the driver and the policies.
struct Fp8dLane {
  int g, t;  // quad group (row g / token g of a fragment) and lane within the quad
};

__device__ __forceinline__ Fp8dLane fp8d_lane() {
  const int lane = threadIdx.x & 31;
  return Fp8dLane{lane >> 2, lane & 3};
}

// Loads one K step of this lane's weights of the row tile at n0. Addresses and predicates are recomputed
// from the kernel arguments each time (a few integer ops): registers kept across the loop would push the
// 32-token tiles over the 128-register budget.
// kTiled (FP8D_CFG_TILED: a weight's decode tiles, kernels_cuda/_tiles.py): the weight is stored tile by tile, each
// (16-row tile, 128-wide step) block of 2 KB laid out as [h][q][lane][16 bytes], rows and K zero-padded to whole
// blocks, so each load instruction of a warp reads 512 contiguous bytes (the row-major layout reads eight 64-byte
// pieces of eight rows) and needs no predicate: 0.79-0.99x the time at the same config on the H200 (session 22).
template <int MT, bool kTiled = false>
__device__ __forceinline__ void fp8d_load_weight_step(Fp8dWeightStep<MT>& d, const uint8_t* __restrict__ w,
                                                      int n0, Fp8dLane L, int N, int K, int s) {
  if constexpr (kTiled) {
    const int nsteps = (K + FP8D_KSTEP - 1) / FP8D_KSTEP;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const uint8_t* blk = w + ((long long)(n0 / 16 + mt) * nsteps + s) * (16 * FP8D_KSTEP) + (L.g * 4 + L.t) * 16;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int q = 0; q < 2; ++q) d.v[mt][h][q] = fp8d_load128(blk + (h * 2 + q) * 512);
    }
  } else {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int kk = s * FP8D_KSTEP + fp8d_chunk_k(L.t, q);  // K % 16 == 0: a chunk is all in or all out
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = n0 + mt * 16 + h * 8 + L.g;
          d.v[mt][h][q] = (row < N && kk < K) ? fp8d_load128_rows(w + (long long)row * K + kk)
                                              : make_uint4(0u, 0u, 0u, 0u);
        }
    }
  }
}

#if defined(FP8D_SMEM_RING) && FP8D_SMEM_RING && FP8D_IS_CUDA
// FP8D_SMEM_RING = S (GemvConfig.smem_ring; absent for the register ring, whose images stay as they were): the ring
// lives in shared memory, S steps deep, filled by cp.async (fp8d_cp_async16), instead of DEPTH steps in registers. Why: at
// M = 16 the register budget holds a ring of 1-3 steps, so fewer bytes are in flight than at M = 1; in shared memory
// the depth costs no registers. Each thread owns its slots (element i of stage st at ring[(st * 4 MT + i) * nthr +
// tid]: a warp's 16-byte accesses are 512 contiguous bytes) and reads back only what it copied: no barrier.
template <int MT>
__device__ __forceinline__ void fp8d_async_weight_step(uint4* slot, int nthr, const uint8_t* __restrict__ w, int n0,
                                                       Fp8dLane L, int N, int K, int s) {
  // The addressing of fp8d_load_weight_step's row-major branch (a shared walker over the chunks changed this module's
  // image, so it stays written out twice).
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int kk = s * FP8D_KSTEP + fp8d_chunk_k(L.t, q);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = n0 + mt * 16 + h * 8 + L.g;
        const bool ok = row < N && kk < K;
        fp8d_cp_async16(slot + ((mt * 2 + h) * 2 + q) * nthr, ok ? w + (long long)row * K + kk : w, ok);
      }
  }
}

template <int MT>
__device__ __forceinline__ void fp8d_read_weight_step(Fp8dWeightStep<MT>& d, const uint4* slot, int nthr) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int q = 0; q < 2; ++q) d.v[mt][h][q] = slot[((mt * 2 + h) * 2 + q) * nthr];
}
#endif

// Fragment slot f = (mt * NT + nt) * 4 + c of lane `lane` -> (row offset in the CTA tile, token).
__device__ __forceinline__ void fp8d_frag_coords(int f, int lane, int NT, int& row, int& tok) {
  const int c = f & 3, tile = f >> 2, mt = tile / NT, nt = tile % NT;
  const int g = lane >> 2, t = lane & 3;
  row = mt * 16 + g + 8 * (c >> 1);
  tok = nt * 8 + 2 * t + (c & 1);
}

// Shared memory of one CTA: the partials [warp][slot][lane] (conflict-free stores), then the tile's row
// scales and bias, then the 32 token scales; then (FP8D_SMEM_RING) the weight ring, 16-byte aligned: ring_steps
// steps of 4 MT 16-byte chunks per thread. kernels_cuda/configs.py GemvConfig.smem_bytes mirrors this size; a
// policy's own shared memory (the W8A8 GEMVs that quantize x themselves) starts at end().
template <int MT, int NT>
struct Fp8dSmemLayout {
  static constexpr int kSlots = MT * NT * 4;
  static constexpr int kRows = 16 * MT;
  __device__ static float* row_scale(float* base, int nwarps) { return base + nwarps * kSlots * 32; }
  __device__ static float* row_bias(float* base, int nwarps) { return row_scale(base, nwarps) + kRows; }
  __device__ static float* tok_scale(float* base, int nwarps) { return row_bias(base, nwarps) + kRows; }
  __device__ static uint4* ring(float* base, int nwarps) {
    return reinterpret_cast<uint4*>(base + ((nwarps * kSlots * 32 + 2 * kRows + 32 + 3) & ~3));
  }
  __device__ static float* end(float* base, int nwarps, int ring_steps, int nthr) {
    return ring_steps ? reinterpret_cast<float*>(ring(base, nwarps) + ring_steps * 4 * MT * nthr)
                      : tok_scale(base, nwarps) + 32;
  }
};

// P::kPrologue if policy P defines it, else false. A function, not a trait struct: a trait's static member would
// add a data symbol to every module, so the images of the policies without a prologue would change.
template <class P>
__device__ constexpr auto fp8d_has_prologue(int) -> decltype(P::kPrologue) {
  return P::kPrologue;
}
template <class P>
__device__ constexpr bool fp8d_has_prologue(long) {
  return false;
}

// P::kTiledWeights if policy P defines it, else false (the same reason again).
template <class P>
__device__ constexpr auto fp8d_tiled_weights(int) -> decltype(P::kTiledWeights) {
  return P::kTiledWeights;
}
template <class P>
__device__ constexpr bool fp8d_tiled_weights(long) {
  return false;
}

// P::kQuantizesSteps if policy P defines it, else false (the same reason again).
template <class P>
__device__ constexpr auto fp8d_quantizes_steps(int) -> decltype(P::kQuantizesSteps) {
  return P::kQuantizesSteps;
}
template <class P>
__device__ constexpr bool fp8d_quantizes_steps(long) {
  return false;
}

// P::kPersistent if policy P defines it, else false (a function for the same reason as fp8d_has_prologue).
template <class P>
__device__ constexpr auto fp8d_is_persistent(int) -> decltype(P::kPersistent) {
  return P::kPersistent;
}
template <class P>
__device__ constexpr bool fp8d_is_persistent(long) {
  return false;
}

// The driver. P (a family policy) provides:
//   MT, NT, DEPTH                    tile shape and weight steps in flight
//   kPartial                         MMAs accumulate per step (into `part`), finish() folds them into acc
//   struct Half, kHalfRegs           the non-weight operands of one half step q (lane chunk q: x, MX codes)
//   struct Scales, kScaleRegs        the per-step scales (block / group), folded in by finish()
//   load_half(Half&, n0, L, s, q), load_scales(Scales&, n0, L, s)
//                                    issue those loads (no arithmetic on the values: no stall)
//   half_mma(dst, Fp8dWeightStep, Half, q)  the MMAs of half step q into dst (part or acc)
//   finish(acc, part, Scales)        end of a step (kPartial only)
//   kUniformScale / uniform_scale()  one output scale for the whole call
//   kRowScale / row_scale(row)       a per-output-row scale
//   kTokScale / tok_scale(tok)       a per-token scale (multiplied as tok_scale * row_scale)
//   kHasRare / cta_needs_rare(n0) / rare()   (the last two and Rare only when kHasRare)
//                                    an alternative policy for inputs the main one cannot take (W8A16 mxfp8:
//                                    scale codes above FP8D_MX_FOLD_MAX), chosen once per CTA before the
//                                    loop: a branch inside the loop would split its instruction schedule
// and optionally
//   kPrologue / prologue()           work of the whole CTA (barriers allowed) right after the wait for the
//                                    previous grid, before the first x load: the W8A8 GEMV that quantizes
//                                    x itself (gemv_w8a8.cu, FP8D_CFG_FQ) fills shared memory there
//   kPersistent                      the grid is smaller than the row tiles (the launcher sizes it to the
//                                    resident CTAs): a CTA runs tiles blockIdx.x, + gridDim.x, ... after ONE
//                                    wait and ONE prologue, and issues the next tile's first weight loads
//                                    before the current tile's reduction (no kHasRare: the policy is per CTA)
//   kTiledWeights                    `w` holds the weight's decode tiles (fp8d_load_weight_step<MT, true>)
//   kQuantizesSteps / quantize_step(Half (&)[2], Scales&, L)
//                                    x arrives raw with the step's scales (load_scales; load_half loads nothing)
//                                    and the policy makes both halves' operands from it before the MMAs (the W8A8
//                                    GEMV that quantizes x in its loop, gemv_w8a8.cu FP8D_CFG_INLINE)
template <class P, bool kPrefetch>
__device__ __forceinline__ void fp8d_skinny_step(const P& p, float (&acc)[P::MT][P::NT][4],
                                                 const Fp8dWeightStep<P::MT>& wt, const typename P::Half (&pre)[2],
                                                 const typename P::Scales& pre_scales, int n0, Fp8dLane L, int s) {
  constexpr int MT = P::MT, NT = P::NT;
  float part[MT][NT][4];
  if constexpr (P::kPartial) fp8d_zero<MT * NT * 4>(&part[0][0][0]);
  float(&dst)[MT][NT][4] = P::kPartial ? part : acc;
  if constexpr (fp8d_quantizes_steps<P>(0)) {
    typename P::Scales sc;
    if constexpr (kPrefetch)
      sc = pre_scales;
    else
      p.load_scales(sc, n0, L, s);
    typename P::Half h[2];
    p.quantize_step(h, sc, L);
    p.half_mma(dst, wt, h[0], 0);
    p.half_mma(dst, wt, h[1], 1);
    p.finish(acc, part, sc);
  } else if constexpr (kPrefetch) {
    p.half_mma(dst, wt, pre[0], 0);
    p.half_mma(dst, wt, pre[1], 1);
    if constexpr (P::kPartial) p.finish(acc, part, pre_scales);
  } else {
    typename P::Scales sc;
    if constexpr (P::kPartial) p.load_scales(sc, n0, L, s);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      typename P::Half h;
      p.load_half(h, n0, L, s, q);
      p.half_mma(dst, wt, h, q);
    }
    if constexpr (P::kPartial) p.finish(acc, part, sc);
  }
}

// Issues the loads of step s's non-weight operands (x, per-step scales) into operand buffer b.
template <class P, int NB>
__device__ __forceinline__ void fp8d_load_step_operands(const P& p, typename P::Half (&half)[NB][2],
                                                        typename P::Scales (&scales)[NB], int b, int n0, Fp8dLane L,
                                                        int s) {
  p.load_half(half[b][0], n0, L, s, 0);
  p.load_half(half[b][1], n0, L, s, 1);
  if constexpr (P::kPartial) p.load_scales(scales[b], n0, L, s);
}

// The main loop over this warp's K steps (ring slot r % D and operand buffer r % NB static after unrolling).
template <class P, bool kPrefetch, int NB, int R>
__device__ __forceinline__ void fp8d_skinny_loop(const P& p, float (&acc)[P::MT][P::NT][4],
                                                 Fp8dWeightStep<P::MT> (&ring)[P::DEPTH],
                                                 typename P::Half (&half)[NB][2], typename P::Scales (&scales)[NB],
                                                 const uint8_t* __restrict__ w, int n0, Fp8dLane L, int N, int K,
                                                 int warp, int nwarps, int nsteps) {
  constexpr int MT = P::MT, D = P::DEPTH;
  constexpr bool kTiled = fp8d_tiled_weights<P>(0);
  for (int s0 = warp; s0 < nsteps; s0 += R * nwarps) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int s = s0 + r * nwarps;
      if (s >= nsteps) break;  // warp-uniform
      if constexpr (kPrefetch) {
        if (s + nwarps < nsteps) fp8d_load_step_operands<P, NB>(p, half, scales, (r + 1) % NB, n0, L, s + nwarps);
      }
      fp8d_skinny_step<P, kPrefetch>(p, acc, ring[r % D], half[r % NB], scales[r % NB], n0, L, s);
      if (s + D * nwarps < nsteps)
        fp8d_load_weight_step<MT, kTiled>(ring[r % D], w, n0, L, N, K, s + D * nwarps);
    }
  }
}

#if defined(FP8D_SMEM_RING) && FP8D_SMEM_RING && FP8D_IS_CUDA
// The main loop with the shared-memory ring (FP8D_SMEM_RING = S): step j of this warp waits for its own copies
// (S + j groups committed, so at most S - 1 may still be pending), reads them, runs the step and refills the slot
// with step j + S. One group is committed per step even when nothing is left to copy: the count stays uniform.
template <class P, bool kPrefetch, int NB, int S>
__device__ __forceinline__ void fp8d_skinny_loop_smem(const P& p, float (&acc)[P::MT][P::NT][4], uint4* ring, int nthr,
                                                      typename P::Half (&half)[NB][2],
                                                      typename P::Scales (&scales)[NB], const uint8_t* __restrict__ w,
                                                      int n0, Fp8dLane L, int N, int K, int warp, int nwarps,
                                                      int nsteps) {
  constexpr int MT = P::MT;
  int slot = 0;
  for (int s0 = warp; s0 < nsteps; s0 += NB * nwarps) {
#pragma unroll
    for (int r = 0; r < NB; ++r) {
      const int s = s0 + r * nwarps;
      if (s >= nsteps) break;  // warp-uniform
      if constexpr (kPrefetch) {
        if (s + nwarps < nsteps) fp8d_load_step_operands<P, NB>(p, half, scales, (r + 1) % NB, n0, L, s + nwarps);
      }
      uint4* st = ring + slot * (4 * MT) * nthr + threadIdx.x;
      fp8d_cp_async_wait<S - 1>();
      Fp8dWeightStep<MT> wt;
      fp8d_read_weight_step<MT>(wt, st, nthr);
      fp8d_skinny_step<P, kPrefetch>(p, acc, wt, half[r % NB], scales[r % NB], n0, L, s);
      if (s + S * nwarps < nsteps) fp8d_async_weight_step<MT>(st, nthr, w, n0, L, N, K, s + S * nwarps);
      fp8d_cp_async_commit();
      slot = slot + 1 == S ? 0 : slot + 1;
    }
  }
  fp8d_cp_async_wait<0>();
}
#endif

// The main loop of policy P, or of its rare policy where the CTA needs it (kHasRare: chosen once per CTA).
template <class P, bool kPrefetch, int NB, int R>
__device__ __forceinline__ void fp8d_skinny_loops(const P& p, bool rare, float (&acc)[P::MT][P::NT][4],
                                                  Fp8dWeightStep<P::MT> (&ring)[P::DEPTH],
                                                  typename P::Half (&half)[NB][2], typename P::Scales (&scales)[NB],
                                                  const uint8_t* __restrict__ w, int n0, Fp8dLane L, int N, int K,
                                                  int warp, int nwarps, int nsteps) {
  if constexpr (P::kHasRare) {
    if (rare) {
      fp8d_skinny_loop<typename P::Rare, kPrefetch, NB, R>(p.rare(), acc, ring, half, scales, w, n0, L, N, K,
                                                                  warp, nwarps, nsteps);
      return;
    }
  }
  fp8d_skinny_loop<P, kPrefetch, NB, R>(p, acc, ring, half, scales, w, n0, L, N, K, warp, nwarps, nsteps);
}

template <class P>
__device__ __forceinline__ void fp8d_skinny_gemv(const P& p, const uint8_t* __restrict__ w,
                                                 const void* __restrict__ bias, void* __restrict__ y, int M,
                                                 int N, int K, int bias_kind, int out_kind) {
  constexpr int MT = P::MT, NT = P::NT, D = P::DEPTH;
  constexpr int NSLOT = MT * NT * 4, ROWS = 16 * MT;
  // Prefetch the next step's operands only where the ring, two steps of them, the accumulators and ~4 MMA
  // operand temporaries per tile leave ~24 registers for addresses (ptxas -v on sm_80/89/90: above that
  // the loop spills).
  constexpr int kStepRegs = 2 * P::kHalfRegs + P::kScaleRegs;
#if defined(FP8D_SMEM_RING) && FP8D_SMEM_RING && FP8D_IS_CUDA
  constexpr int kRingS = FP8D_SMEM_RING;  // the weight ring in shared memory (above): one step of it in registers
  static_assert(kRingS >= 1 && kRingS <= 8, "FP8D_SMEM_RING: 1..8 steps");
  static_assert(!fp8d_is_persistent<P>(0) && !fp8d_tiled_weights<P>(0), "FP8D_SMEM_RING: row-major, one pass");
  constexpr int kRegRing = 1;
#else
  constexpr int kRingS = 0;
  constexpr int kRegRing = D;
#endif
  // With the ring in shared memory, one module that fits this estimate spills anyway (16 bytes, sm_90, NVRTC 13.0): the
  // W8A8 GEMV with 1x128 groups (the only policy whose per-step scales exceed one register per row tile) at one token
  // tile and two row tiles. It loads its operands just in time instead.
  constexpr bool kRingTight = kRingS > 0 && P::kPartial && P::kScaleRegs > MT && MT == 2 && NT == 1;
  constexpr bool kPrefetch =
      !kRingTight && kRegRing * 16 * MT + 2 * kStepRegs + (P::kPartial ? 12 : 8) * MT * NT <= 104;
  constexpr int NB = kPrefetch ? 2 : 1;               // operand buffers
  constexpr int R = (D % NB == 0) ? D : NB * D;        // unroll: ring slot (j % D) and buffer (j % NB) static
  using Smem = Fp8dSmemLayout<MT, NT>;
  static_assert(!P::kTokScale || P::kRowScale, "token scales are applied together with row scales");
  static_assert(D >= 1 && D <= 4, "1..4 weight steps in flight");
  extern __shared__ float fp8d_red[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const Fp8dLane L = fp8d_lane();
  const int nsteps = (K + FP8D_KSTEP - 1) / FP8D_KSTEP;
  constexpr bool kPersistent = fp8d_is_persistent<P>(0), kTiled = fp8d_tiled_weights<P>(0);
  static_assert(!kPersistent || !P::kHasRare, "a persistent CTA chooses no policy per tile");
  // The launcher's grid: one CTA per row tile, or (kPersistent) the first of the CTA's tiles.
  const int n_first = blockIdx.x * ROWS;
  if (n_first >= N) return;  // the whole CTA: no barrier is pending
  Fp8dWeightStep<MT> ring[D];
  typename P::Half half[NB][2];
  typename P::Scales scales[NB];
#if defined(FP8D_SMEM_RING) && FP8D_SMEM_RING && FP8D_IS_CUDA
  uint4* smem_ring = Smem::ring(fp8d_red, nwarps);  // after the reduction's layout, 16-byte aligned
  const int nthr = blockDim.x;
#pragma unroll
  for (int d = 0; d < kRingS; ++d) {
    if (warp + d * nwarps < nsteps)
      fp8d_async_weight_step<MT>(smem_ring + d * (4 * MT) * nthr + threadIdx.x, nthr, w, n_first, L, N, K,
                                 warp + d * nwarps);
    fp8d_cp_async_commit();
  }
#endif
  // This warp's K steps are warp, warp + nwarps, ...; ring slot d holds the d-th of them to come.
#pragma unroll
  for (int d = 0; d < D; ++d)
    if (kRingS == 0 && warp + d * nwarps < nsteps)
      fp8d_load_weight_step<MT, kTiled>(ring[d], w, n_first, L, N, K, warp + d * nwarps);
  fp8d_allow_dependent_grid();
  // Which policy runs the loop: read before the wait (only weight data), so its latency hides behind the
  // previous grid's tail and this CTA's first weight loads. CTA-uniform (a barrier inside).
  bool rare = false;
  if constexpr (P::kHasRare) rare = p.cta_needs_rare(n_first);
  fp8d_wait_prior_grid();
  // The prologue reads x (the previous grid may have written it): after the wait, the weight loads above in flight.
  if constexpr (fp8d_has_prologue<P>(0)) p.prologue();
  for (int next_n0 = n_first;;) {  // one pass unless kPersistent
    const int n0 = next_n0;
    if (kPrefetch && warp < nsteps) fp8d_load_step_operands<P, NB>(p, half, scales, 0, n0, L, warp);
    // Output scales and bias: loaded before the main loop (in flight during it, read after the reduction)
    // where 4 more live registers fit; the 4-accumulator-tile configs load them after the loop instead.
    constexpr bool kEarlyOut = MT * NT <= 2;
    float uscale = 1.0f, tscale = 1.0f, rscale = 1.0f, rbias = 0.0f;
    auto load_out = [&]() {
      if constexpr (P::kUniformScale) uscale = p.uniform_scale();
      if constexpr (P::kTokScale) tscale = threadIdx.x < M ? p.tok_scale(threadIdx.x) : 1.0f;
      if (threadIdx.x < ROWS && n0 + (int)threadIdx.x < N) {
        if constexpr (P::kRowScale) rscale = p.row_scale(n0 + threadIdx.x);
        if (bias != nullptr) rbias = fp8d_load_as_f32(bias, n0 + threadIdx.x, bias_kind);
      }
    };
    if constexpr (kEarlyOut) load_out();

    float acc[MT][NT][4];
    fp8d_zero<NSLOT>(&acc[0][0][0]);
#if defined(FP8D_SMEM_RING) && FP8D_SMEM_RING && FP8D_IS_CUDA
    if constexpr (P::kHasRare) {
      if (rare)
        fp8d_skinny_loop_smem<typename P::Rare, kPrefetch, NB, kRingS>(p.rare(), acc, smem_ring, nthr, half, scales,
                                                                        w, n0, L, N, K, warp, nwarps, nsteps);
      else
        fp8d_skinny_loop_smem<P, kPrefetch, NB, kRingS>(p, acc, smem_ring, nthr, half, scales, w, n0, L, N, K, warp,
                                                         nwarps, nsteps);
    } else {
      fp8d_skinny_loop_smem<P, kPrefetch, NB, kRingS>(p, acc, smem_ring, nthr, half, scales, w, n0, L, N, K, warp,
                                                       nwarps, nsteps);
    }
#else
    fp8d_skinny_loops<P, kPrefetch, NB, R>(p, rare, acc, ring, half, scales, w, n0, L, N, K, warp, nwarps, nsteps);
#endif
    // kPersistent: the ring is free; the next tile's first weight loads go out now, in flight during this
    // tile's reduction and epilogue.
    int n_next = N;
    if constexpr (kPersistent) {
      n_next = n0 + gridDim.x * ROWS;
      if (n_next < N) {
#pragma unroll
        for (int d = 0; d < D; ++d)
          if (warp + d * nwarps < nsteps)
            fp8d_load_weight_step<MT, kTiled>(ring[d], w, n_next, L, N, K, warp + d * nwarps);
      }
    }

    if constexpr (!kEarlyOut) load_out();
    // Reduction over the K-splitting warps in a fixed order (run-to-run deterministic), then the epilogue.
#pragma unroll
    for (int f = 0; f < NSLOT; ++f) fp8d_red[(warp * NSLOT + f) * 32 + lane] = (&acc[0][0][0])[f];
    float* row_s = Smem::row_scale(fp8d_red, nwarps);
    float* row_b = Smem::row_bias(fp8d_red, nwarps);
    float* tok_s = Smem::tok_scale(fp8d_red, nwarps);
    if (threadIdx.x < ROWS) {
      row_s[threadIdx.x] = rscale;
      row_b[threadIdx.x] = rbias;
    }
    if (threadIdx.x < 32) tok_s[threadIdx.x] = tscale;
    __syncthreads();
    for (int i = threadIdx.x; i < NSLOT * 32; i += blockDim.x) {
      const int f = i >> 5, ln = i & 31;
      int r, tok;
      fp8d_frag_coords(f, ln, NT, r, tok);
      const int row = n0 + r;
      if (row >= N || tok >= M) continue;
      float v = 0.0f;
      for (int wp = 0; wp < nwarps; ++wp) v += fp8d_red[(wp * NSLOT + f) * 32 + ln];
      if constexpr (P::kUniformScale) v *= uscale;
      if constexpr (P::kRowScale && P::kTokScale) v *= tok_s[tok] * row_s[r];
      if constexpr (P::kRowScale && !P::kTokScale) v *= row_s[r];
      if (bias != nullptr) v += row_b[r];
      fp8d_store_from_f32(y, (long long)tok * N + row, v, out_kind);
    }
    if (n_next >= N) break;  // always taken unless kPersistent
    next_n0 = n_next;
    __syncthreads();  // the epilogue above read the shared partials the next tile's reduction writes
  }
}

// skinny_common.cuh: the parts the two decode-GEMV families (W8A16, W8A8) share.
//
// Geometry (why it looks like this): at M <= 32 the weight stream is the whole cost, so every lane issues
// 16-byte loads along K and a CTA splits K across its warps (blockDim.x / 32 of them, interleaved by
// 128-wide steps) to put enough bytes in flight even when N is small (N = 4096 -> 256 CTAs of 8 warps).
// The tokens are the "n" side of an m16n8 MMA: a warp owns MT 16-row tiles of W and NT 8-token tiles of x.
// K is permuted consistently in A and B: lane t of a quad owns codes [32 t, 32 t + 32) of each 128-step,
// so its 16-byte loads feed the MMA fragments directly, and its chunk is exactly one MX group.
// The K-split partial sums are reduced through shared memory in warp order: deterministic.
#pragma once
#include "fp8_common.cuh"

// Fragment slot f = (mt * NT + nt) * 4 + c of lane `lane` -> (row offset in the CTA tile, token).
__device__ __forceinline__ void fp8d_frag_coords(int f, int lane, int NT, int& row, int& tok) {
  const int c = f & 3, tile = f >> 2, mt = tile / NT, nt = tile % NT;
  const int g = lane >> 2, t = lane & 3;
  row = mt * 16 + g + 8 * (c >> 1);
  tok = nt * 8 + 2 * t + (c & 1);
}

// Writes this warp's accumulators to shared memory and returns after the CTA barrier; the caller then
// reduces with fp8d_reduce_slot. Layout [warp][slot][lane] keeps the stores conflict-free.
template <int NSLOT>
__device__ __forceinline__ void fp8d_stage_partials(float* red, const float* acc) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int f = 0; f < NSLOT; ++f) red[(warp * NSLOT + f) * 32 + lane] = acc[f];
  __syncthreads();
}

// Sum over the K-splitting warps in a fixed order (run-to-run deterministic).
template <int NSLOT>
__device__ __forceinline__ float fp8d_reduce_slot(const float* red, int f, int lane, int nwarps) {
  float v = 0.0f;
  for (int w = 0; w < nwarps; ++w) v += red[(w * NSLOT + f) * 32 + lane];
  return v;
}

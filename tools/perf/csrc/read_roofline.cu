// read_roofline.cu (tools/perf/probe_read_roofline.py): the fastest pure read of a weight's bytes, the ceiling a decode
// GEMV that reads each byte once can reach on the same bytes in the same timing method. Each thread keeps UNROLL
// 16-byte loads in flight over a grid-stride loop and folds them into one word; one store per thread that can never
// happen in practice (the fold equals a 64-bit value of the caller's choosing) keeps the loads alive.
#include "fp8_common.cuh"

#ifndef RR_UNROLL
#define RR_UNROLL 4
#endif

extern "C" __global__ void __launch_bounds__(256) rr_read(const uint4* __restrict__ src, long long nvec,
                                                          unsigned long long never, unsigned long long* sink) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned acc = 0u;
  for (; i + (RR_UNROLL - 1) * stride < nvec; i += RR_UNROLL * stride) {
    uint4 v[RR_UNROLL];
#pragma unroll
    for (int u = 0; u < RR_UNROLL; ++u) v[u] = fp8d_load128(reinterpret_cast<const uint8_t*>(src + i + u * stride));
#pragma unroll
    for (int u = 0; u < RR_UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < nvec; i += stride) {
    const uint4 v = fp8d_load128(reinterpret_cast<const uint8_t*>(src + i));
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if ((unsigned long long)acc == never) sink[0] = acc;
}

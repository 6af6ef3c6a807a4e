// wgmma_splitk_reduce.cu: the second kernel of the wgmma W8A16 GEMM's split K (gemm_w8a16_wgmma.cu, a config with
// split > 1): y[m, n] = the sum over the K slices of part[z, m, n], in slice order (deterministic: no atomics), plus the
// bias, as bf16. A module of its own, so the GEMM's module keeps one entry (its ptxas report is the GEMM's).
#include "fp8_common.cuh"

// Four consecutive outputs a thread (16-byte partial loads when N % 4 == 0).
extern "C" __global__ void __launch_bounds__(256)
    fp8d_w8a16_wgmma_reduce(const float* __restrict__ part, int splits, int M, int N, const void* __restrict__ bias,
                            int bias_kind, unsigned short* __restrict__ y) {
  fp8d_wait_prior_grid();
  const long long total = (long long)M * N, i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (i >= total) return;
  float v[4];
  if ((N & 3) == 0) {
    float4 a = *reinterpret_cast<const float4*>(part + i);
    for (int z = 1; z < splits; ++z) {
      const float4 b = *reinterpret_cast<const float4*>(part + z * total + i);
      a.x += b.x;
      a.y += b.y;
      a.z += b.z;
      a.w += b.w;
    }
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[e] = 0.f;
      if (i + e < total)
        for (int z = 0; z < splits; ++z) v[e] += part[z * total + i + e];
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (i + e >= total) break;
    const int n = (int)((i + e) % N);
    y[i + e] = fp8d_f32_to_bf16_bits(v[e] + (bias_kind >= 0 ? fp8d_load_as_f32(bias, n, bias_kind) : 0.f));
  }
}

// trace_w8a8.cu (tools/perf/probe_quant_timeline.py): the W8A8 decode route's kernels with per-CTA timestamps, to see
// where the activation quantizer's share of the route goes. Compiled beside the product's sources by the probe, which
// also provides act_quant.cu and gemv_w8a8.cu as the headers included below (their kernels are in this module too,
// unchanged). %globaltimer is the GPU's nanosecond clock, common to all SMs.
//
// Each traced kernel writes, per CTA, [start, after the wait for the previous grid, end] to tr[3 * blockIdx.x + 0..2].
#include "act_quant_inc.cuh"
#include "gemv_w8a8_inc.cuh"

__device__ __forceinline__ unsigned long long fp8d_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The CTA's stamps, once all its threads are done: start t0, past the wait t1 (0: a prologue wrote it), and now.
__device__ __forceinline__ void fp8d_trace_cta_end(unsigned long long* __restrict__ tr, unsigned long long t0,
                                                   unsigned long long t1) {
  __syncthreads();
  if (threadIdx.x == 0) {
    tr[3 * blockIdx.x] = t0;
    if (t1) tr[3 * blockIdx.x + 1] = t1;
    tr[3 * blockIdx.x + 2] = fp8d_now();
  }
}

// act_quant.cu's one-launch per-tensor quantizer (fp8d_act_quant_tensor_redundant), traced, with its programmatic
// trigger (griddepcontrol.launch_dependents) at TRIGGER: 0 at entry (the shipped kernel), 1 once the CTA has read x
// and reduced its amax, 2 at the end. Why: a trigger at entry lets the next GEMV's CTAs start and flood the memory
// system with their weight prefetch while this kernel still has to read x. The amax loop is
// fp8d_act_quant_tensor_all's (16-byte path; the probe passes 16-byte aligned x).
template <int TRIGGER>
__device__ __forceinline__ void trace_quant_tensor_body(const void* __restrict__ x, int x_kind,
                                                        uint8_t* __restrict__ codes, float* __restrict__ scale,
                                                        long long numel, unsigned long long* __restrict__ tr) {
  const unsigned long long t0 = fp8d_now();
  if (TRIGGER == 0) fp8d_allow_dependent_grid();
  fp8d_wait_prior_grid();
  const unsigned long long t1 = fp8d_now();
  __shared__ float sm[32];
  float amax = 0.0f;
  const int per = x_kind == FP8D_DTYPE_F32 ? 4 : 8;
  const long long nvec = numel / per;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
#pragma unroll 4
  for (long long i = threadIdx.x; i < nvec; i += blockDim.x) amax = fp8d_vec_absmax(fp8d_load128_keep(xv + i), x_kind, amax);
  for (long long i = nvec * per + threadIdx.x; i < numel; i += blockDim.x)
    amax = fp8d_nanmax(amax, fabsf(fp8d_load_as_f32(x, i, x_kind)));
  amax = fp8d_block_max(amax, sm);
  if (TRIGGER == 1) fp8d_allow_dependent_grid();
  fp8d_quantize_grid_share(amax, x, x_kind, codes, scale, numel);
  __syncthreads();
  if (TRIGGER == 2) fp8d_allow_dependent_grid();
  fp8d_trace_cta_end(tr, t0, t1);
}

// One traced per-tensor quantizer entry: NAME runs BODY<ARG> (the trigger variant or the one-read variant below).
#define FP8D_TRACE_QUANT_ENTRY(NAME, BODY, ARG)                                                                     \
  extern "C" __global__ void __launch_bounds__(1024) NAME(const void* __restrict__ x, int x_kind,                  \
                                                          uint8_t* __restrict__ codes, float* __restrict__ scale,  \
                                                          long long numel, unsigned long long* __restrict__ tr) {  \
    BODY<ARG>(x, x_kind, codes, scale, numel, tr);                                                                  \
  }
#define FP8D_TRACE_QUANT(NAME, TRIGGER) FP8D_TRACE_QUANT_ENTRY(NAME, trace_quant_tensor_body, TRIGGER)
FP8D_TRACE_QUANT(trace_act_quant_tensor, 0)
FP8D_TRACE_QUANT(trace_act_quant_tensor_t1, 1)
FP8D_TRACE_QUANT(trace_act_quant_tensor_t2, 2)

// A per-tensor quantizer with ONE round trip to x: every CTA loads all of x at once (SLOTS 16-byte vectors a thread,
// all in flight, kept in registers), reduces the amax, and CTA c quantizes the vectors of its register slot c (the
// launch has one CTA per slot: ceil(vectors / threads) <= SLOTS), so x is never read twice. The same amax, scale and
// fp8d_quant_store_vec as act_quant.cu: the same codes (the probe checks). 16-byte aligned x, numel a multiple of the
// values per vector (the probe's shapes). Session 27 ran SLOTS = 8 at every M (trace_act_quant_tensor_1rt): faster at
// M = 16, slower at M = 1, 4, where 8 slots of registers keep its 1024-thread CTA from fitting beside a resident GEMV
// CTA; the _s1 / _s2 / _s4 instantiations (the probe takes the smallest that holds x) have not run yet.
template <int SLOTS>
__device__ __forceinline__ void trace_quant_tensor_1rt_body(const void* __restrict__ x, int x_kind,
                                                            uint8_t* __restrict__ codes, float* __restrict__ scale,
                                                            long long numel, unsigned long long* __restrict__ tr) {
  const unsigned long long t0 = fp8d_now();
  fp8d_allow_dependent_grid();
  fp8d_wait_prior_grid();
  const unsigned long long t1 = fp8d_now();
  __shared__ float sm[32];
  const int per = x_kind == FP8D_DTYPE_F32 ? 4 : 8;
  const long long nvec = numel / per;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  uint4 v[SLOTS];
  float amax = 0.0f;
#pragma unroll
  for (int r = 0; r < SLOTS; ++r) {
    const long long i = threadIdx.x + (long long)r * blockDim.x;
    v[r] = i < nvec ? fp8d_load128_keep(xv + i) : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int r = 0; r < SLOTS; ++r) amax = fp8d_vec_absmax(v[r], x_kind, amax);
  const float s = fp8d_act_scale(fp8d_block_max(amax, sm));
  if (blockIdx.x == 0 && threadIdx.x == 0) scale[0] = s;
#pragma unroll
  for (int r = 0; r < SLOTS; ++r) {
    const long long i = threadIdx.x + (long long)r * blockDim.x;
    if (r == (int)blockIdx.x && i < nvec) fp8d_quant_store_vec(v[r], x_kind, codes, i, s);
  }
  fp8d_trace_cta_end(tr, t0, t1);
}

#define FP8D_TRACE_QUANT_1RT(NAME, SLOTS) FP8D_TRACE_QUANT_ENTRY(NAME, trace_quant_tensor_1rt_body, SLOTS)
FP8D_TRACE_QUANT_1RT(trace_act_quant_tensor_1rt, 8)  // session 27's run
FP8D_TRACE_QUANT_1RT(trace_act_quant_tensor_1rt_s1, 1)
FP8D_TRACE_QUANT_1RT(trace_act_quant_tensor_1rt_s2, 2)
FP8D_TRACE_QUANT_1RT(trace_act_quant_tensor_1rt_s4, 4)

// The two-launch route's GEMV (fp8d_w8a8_gemv), traced: a prologue stamps the time the CTA passed its wait.
template <class Base>
struct Fp8dTraced : Base {
  static constexpr bool kPrologue = true;
  unsigned long long* tr;
  __device__ __forceinline__ void prologue() const {
    if (threadIdx.x == 0) tr[3 * blockIdx.x + 1] = fp8d_now();
  }
};

extern "C" __global__ void __launch_bounds__(256, 2) trace_w8a8_gemv(
    const uint8_t* __restrict__ w, const float* __restrict__ ws, const uint8_t* __restrict__ xq,
    const float* __restrict__ xs, const void* __restrict__ bias, void* __restrict__ y, int M, int N, int K,
    int bias_kind, int out_kind, unsigned long long* __restrict__ tr) {
  const unsigned long long t0 = fp8d_now();
  using P = Fp8dTraced<W8A8Gemv<FP8D_CFG_ACTQ, FP8D_CFG_NT, FP8D_CFG_MT, FP8D_CFG_U>>;
  const P p{{ws, xs, M, N, K, xq}, tr};
  fp8d_skinny_gemv(p, w, bias, y, M, N, K, bias_kind, out_kind);
  fp8d_trace_cta_end(tr, t0, 0);  // its prologue stamped the wait
}

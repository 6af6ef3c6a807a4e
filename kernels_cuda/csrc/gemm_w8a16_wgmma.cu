// gemm_w8a16_wgmma.cu: the W8A16 tensor-core GEMM for sm_90, y = x @ (q * s)^T with bf16 x, e4m3 weight codes
// decoded in registers, fp32 accumulation (cuda.w8a16_gemm_wgmma serves M > 32; the kernel itself takes any M).
//
// Why a hand-written kernel: the Triton W8A16 GEMM's tensor pipe is busy ~half the time (session 10's profile). Each
// K step waits for every wgmma before decoding the next step's weight codes, because Triton's PTX would otherwise
// rewrite the registers of wgmmas still in flight. Here the weight is wgmma's register operand A and two register
// sets alternate: the codes of step k are decoded while the wgmmas of step k - 1 run (depth 2, session 30: three sets,
// while the wgmmas of steps k - 2 and k - 1 run).
//
// Shape of the computation: D[n, m] = sum_k W[n, k] x[m, k]. A = the weight tile (64 rows a warpgroup, from
// registers), B = the x tile (K-major in shared memory, read through a descriptor), so the instruction's N is the
// CTA's token count BM (64..256, a multiple of 16) and the weight never needs a transposed copy. CTA = WGS warpgroups
// (64 x WGS weight rows). K steps of 64; TMA fills a STAGES-deep ring of x and code tiles STAGES - 1 - DEPTH steps
// ahead (one thread issues two bulk copies a step; an mbarrier per stage counts their bytes). Out-of-range rows and
// the K tail are zero-filled by TMA (never stored). Split K (the launcher's `split`, gridDim.y slices of the K steps): each slice
// writes its scaled fp32 partial and fp8d_w8a16_wgmma_reduce (wgmma_splitk_reduce.cu) sums them in slice order with the bias; at M = 256 the
// efficient 256 x 128 tiles are 16-48 CTAs for N = 4096-12288, so without it most SMs idle. With per-thread cp.async copies instead (session 28's second version) the warps
// issued ~350 instructions each per K step and their instruction stream, not the tensor pipe, set the pace (Nsight
// Compute: 53.9 % tensor-pipe utilization at M = 4096); in the SASS of a cp.async rewrite with precomputed copy
// addresses (compiled, never run) ~250 of ~335 a step were still the copies' address arithmetic.
//
// Shared-memory layouts (set by the tensor maps' swizzle modes, kernels_cuda/_wgmma_gemm.py):
//   x tile (per stage, 1024-byte aligned): 128-byte swizzle: row r (64 bf16 = 128 bytes) at r * 128, its 16-byte
//     chunk c at chunk position c ^ (r % 8). The wgmma descriptor says the same (swizzle mode 128B, 8-row stride
//     1024); the k16 sub-step kk starts 32 kk bytes into the row (the hardware applies the XOR). Without a swizzle
//     (the "interleave" layout) the wgmma reads of 8-row groups 1024 bytes apart hit the same banks: session 28's
//     first version ran at 0.26-0.63x of bf16.
//   code tile: 64-byte swizzle: row r (64 codes) at r * 64, its chunk c at c ^ ((r / 2) % 4). The fragment loads
//     below are then free of bank conflicts (without it, rows g and g + 2 share banks).
// Scales: per tensor / per row in the epilogue (exact: linear); MX (e8m0 per 32 along K) on the decode's one bf16x2
// multiply (fp8d_mx_decode_mul: code x 2^(c - 127) with one rounding, as the Triton W8A16 GEMM's prescale and the MX
// GEMV), plus a second multiply for the rare scale codes above 134. A thread reads its two rows' two codes of step
// kt + 2 while it decodes step kt (one 16-bit load a row; MX needs K % 64 == 0). FP8D_MX_FOLD (the launcher, for a
// weight whose codes are all at most 134, dispatch.mx_fold: every real checkpoint's): each multiplier is one IMAD and
// there is no warp vote or second multiply (session 37: 0.93-0.99x the time in 14 of 16 mxfp8 cells; the same choice
// made in the kernel, by a scan of the CTA's codes, ran slower: with two K loops in one kernel, more registers and
// twice the code).
// Needs K % 16 == 0 and 16-byte aligned x and codes (the tensor maps' global strides; checked by the launcher).
#include "fp8_common.cuh"
#include "wgmma_sm90.cuh"

#if !defined(FP8D_CFG_BM) || !defined(FP8D_CFG_WGS) || !defined(FP8D_CFG_STAGES) || !defined(FP8D_CFG_SCALE)
#error "compile through kernels_cuda._wgmma_gemm (it passes the config as -D)"
#endif
#if FP8D_CFG_SCALE != FP8D_SCALE_TENSOR && FP8D_CFG_SCALE != FP8D_SCALE_ROW && FP8D_CFG_SCALE != FP8D_SCALE_MX
#error "the wgmma W8A16 GEMM applies per-tensor, per-row and MX weight scales"
#endif
#define FP8D_WG_MX (FP8D_CFG_SCALE == FP8D_SCALE_MX)
#ifndef FP8D_CFG_DEPTH
#define FP8D_CFG_DEPTH 1  // K steps of wgmmas left in flight while the next step is decoded (the launcher's `depth`)
#endif
#ifndef FP8D_MX_FOLD
#define FP8D_MX_FOLD 0  // MX: every scale code of the weight is at most FP8D_MX_FOLD_MAX (the launcher knows it)
#endif
#ifndef FP8D_CFG_KCLUSTER
#define FP8D_CFG_KCLUSTER 1  // > 1: the K slices of a tile form a cluster and sum in shared memory (`slice_cluster`)
#endif

namespace {
constexpr int kBM = FP8D_CFG_BM;
constexpr int kWGS = FP8D_CFG_WGS;
constexpr int kStages = FP8D_CFG_STAGES;
// Depth D: a step waits until at most D steps of wgmmas are in flight, so D + 1 register sets of the decoded weight
// rotate, and a stage is refilled only once the wgmmas of the step D + 1 back are done: the copies then run
// kStages - 1 - D steps ahead.
constexpr int kDepth = FP8D_CFG_DEPTH;
constexpr int kLead = kStages - 1 - kDepth;
constexpr int kBN = 64 * kWGS;
constexpr int kBK = 64;
constexpr int kThreads = 128 * kWGS;
constexpr int kXStage = kBM * kBK * 2;
constexpr int kWStage = kBN * kBK;
constexpr int kStage = kXStage + kWStage;
constexpr int kOutRow = kBN + 8;  // bf16 elements per row of the epilogue's staging tile (16 bytes of padding)
// Any multiple of 16 from 64 to 256 (the wrappers of wgmma_sm90.cuh): a tile height that divides M into fewer wasted
// rows or fills the last wave of tiles (M = 1024 in tiles of 208 tokens: 5 tiles, 52 x 5 = 260 of them for N = 6656
// on 132 SMs, against 208 tiles of 256 that leave the second wave half empty).
static_assert(kBM % 16 == 0 && kBM >= 64 && kBM <= 256, "wgmma N (tokens per tile): a multiple of 16 in 64..256");
static_assert(kWGS >= 1 && kWGS <= 4, "one to four warpgroups");
static_assert(kDepth == 1 || kDepth == 2, "one or two steps of wgmmas in flight");
static_assert(kLead >= 1, "copies run at least one step ahead: kStages >= 2 + kDepth");
static_assert(kBM * kOutRow * 2 <= kStages * kStage, "the epilogue's tile reuses the pipeline's shared memory");
static_assert(kStage % 1024 == 0, "each stage's x tile must start 1024-byte aligned (the 128B swizzle pattern)");
}  // namespace

// A CUtensorMap (cuda.h), passed by value as a __grid_constant__ kernel parameter.
struct alignas(64) Fp8dTensorMap {
  unsigned long long v[16];
};

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)

__device__ __forceinline__ unsigned fp8d_smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Descriptor of a K-major, 128-byte-swizzled B tile at shared address `addr` (see the layout above): start address,
// leading byte offset (unused by swizzled K-major layouts: 1), stride byte offset 1024, layout type 1 (128B swizzle).
__device__ __forceinline__ unsigned long long fp8d_desc_kmajor_sw128(unsigned addr) {
  return (unsigned long long)((addr & 0x3ffffu) >> 4) | (1ull << 16) | ((unsigned long long)(1024u >> 4) << 32) |
         (1ull << 62);
}

__device__ __forceinline__ void fp8d_mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ bool fp8d_mbar_try_wait(unsigned bar, unsigned parity) {
  unsigned ok;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok != 0;
}

// Thread 0: the bulk copies of K tile `kt` into the stage at `stage`, completing on the mbarrier `bar` (its byte count
// set with the code tile's copy). Two halves, because the prologue issues the code tiles before the kernel waits for
// the one launched before it (a programmatic dependent launch: the weight is not that kernel's output, see
// kernels_cuda._launch.pdl_allowed) and the x tiles after the wait.
__device__ __forceinline__ void fp8d_issue_stage_codes(const Fp8dTensorMap& tmw, unsigned stage, unsigned bar, int kt,
                                                       int n0) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "n"(kStage) : "memory");
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(stage + kXStage), "l"(reinterpret_cast<unsigned long long>(&tmw)), "r"(kt * kBK), "r"(n0), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void fp8d_issue_stage_x(const Fp8dTensorMap& tmx, unsigned stage, unsigned bar, int kt,
                                                   int m0) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(stage), "l"(reinterpret_cast<unsigned long long>(&tmx)), "r"(kt * kBK), "r"(m0), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void fp8d_issue_stage(const Fp8dTensorMap& tmx, const Fp8dTensorMap& tmw, unsigned stage,
                                                 unsigned bar, int kt, int m0, int n0) {
  fp8d_issue_stage_codes(tmw, stage, bar, kt, n0);
  fp8d_issue_stage_x(tmx, stage, bar, kt, m0);
}

// One K step: decode this step's codes into `a` (the set no wgmma in flight reads), issue the four k16 wgmmas, and
// wait until at most kDepth steps of wgmmas are in flight. kt counts this CTA's steps; its K slice starts at step kt0.
__device__ __forceinline__ void fp8d_k_step(float (&acc)[kBM / 2], unsigned (&a)[4][4], const unsigned char* smem,
                                            unsigned sbase, unsigned bars, int kt, int k_tiles, int kt0,
                                            const Fp8dTensorMap& tmx, const Fp8dTensorMap& tmw, int m0, int n0,
                                            const int (&woff)[4], unsigned sel, unsigned (&mx)[2],
                                            const unsigned short* mx_row0, const unsigned short* mx_row1) {
  __syncthreads();  // every warp is past the wgmmas of step kt - 1 - kDepth: their stage may be refilled
  if (threadIdx.x == 0 && kt + kLead < k_tiles) {
    const int s2 = (kt + kLead) % kStages;
    fp8d_issue_stage(tmx, tmw, sbase + s2 * kStage, bars + 8 * s2, kt0 + kt + kLead, m0, n0);
  }
  const int s = kt % kStages;
  while (!fp8d_mbar_try_wait(bars + 8 * s, (kt / kStages) & 1)) {
  }
  const unsigned xs = sbase + s * kStage;
  const unsigned char* wtile = smem + s * kStage + kXStage;
#if FP8D_WG_MX
  unsigned mul[2][2];  // [row h][group]: 2^(c - 7) as bf16x2 (fp8d_mx_decode_mul)
#if FP8D_MX_FOLD
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int q = 0; q < 2; ++q) mul[h][q] = fp8d_mx_folded_mul((mx[h] >> (8 * q)) & 0xffu);
#else
  bool big = false;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const unsigned c = (mx[h] >> (8 * q)) & 0xffu;
      mul[h][q] = fp8d_mx_decode_mul(c);
      big |= c > FP8D_MX_FOLD_MAX && c != 0xffu;
    }
#endif
#endif
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // h = 0: row g, h = 1: row g + 8
      const unsigned* p = reinterpret_cast<const unsigned*>(wtile + woff[kk] + h * 8 * kBK);
#if FP8D_WG_MX
      fp8d_decode4_bf16x2_fast(__byte_perm(p[0], p[2], sel), a[kk][h], a[kk][2 + h], mul[h][kk >> 1]);
#else
      fp8d_decode4_bf16x2_fast(__byte_perm(p[0], p[2], sel), a[kk][h], a[kk][2 + h]);
#endif
    }
  }
#if FP8D_WG_MX
#if !FP8D_MX_FOLD
  if (__any_sync(0xffffffffu, big)) {  // scales above 2^7: the rest of 2^(c - 127) (real checkpoints have none)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const unsigned r = fp8d_mx_rest_mul((mx[h] >> (8 * (kk >> 1))) & 0xffu);
        a[kk][h] = fp8d_bf16x2_fma(a[kk][h], r, 0x80008000u);
        a[kk][2 + h] = fp8d_bf16x2_fma(a[kk][2 + h], r, 0x80008000u);
      }
  }
#endif
  // The codes of step kt + D + 1 (this set's next use): a load in flight for D + 1 steps (clamped at the last step).
  const int kn = min(kt + kDepth + 1, k_tiles - 1);
  mx[0] = mx_row0[kn];
  mx[1] = mx_row1[kn];
#endif
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) fp8d_reg_fence(a[kk][j]);
#pragma unroll
  for (int i = 0; i < kBM / 2; ++i) fp8d_reg_fence(acc[i]);
  fp8d_wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) fp8d_wgmma_bf16_rs<kBM>(acc, a[kk], fp8d_desc_kmajor_sw128(xs + kk * 32));
  fp8d_wgmma_commit();
#pragma unroll
  for (int i = 0; i < kBM / 2; ++i) fp8d_reg_fence(acc[i]);
  fp8d_wgmma_wait<kDepth>();
}

#if FP8D_CFG_KCLUSTER > 1
// Split K without partials in global memory (session 35): the launcher's K slices of one tile (gridDim.y of them) are
// a thread-block cluster; after the K loop they sum their accumulators through distributed shared memory, each slice
// a part of the tile's tokens (a reduce-scatter, session 36: remote stores, every slice adding and writing its part;
// session 35's first version, slice 0 loading every peer's whole tile and writing it alone, took 0.8-0.9 us more per
// call on a K sweep; the exchange still costs ~3.3 us for 64 KB a CTA, and through L2 instead it is slower), then run
// the ordinary epilogue on their parts. No second launch, no fp32 partials through L2. Why: at M = 256 the TMA ring
// bounds the small-N shapes, and a bigger tile halves the bytes each SM takes in per MMA, but 128 x 128 tiles are 64
// CTAs at N = 4096 (half the SMs) and the global-memory split K costs its partials and a second kernel.
static_assert(FP8D_CFG_KCLUSTER <= 8, "a portable cluster holds at most 8 CTAs");
// Token groups a slice receives from each peer: at most ceil(groups / slices).
constexpr int kClusterPart = (kBM / 8 + FP8D_CFG_KCLUSTER - 1) / FP8D_CFG_KCLUSTER;
static_assert((FP8D_CFG_KCLUSTER - 1) * kClusterPart * 16 * kThreads <= kStages * kStage,
              "the parts a slice receives fit the pipeline's shared memory");

__device__ __forceinline__ void fp8d_cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The shared::cluster address of `local`'s counterpart in CTA `rank` of the cluster.
__device__ __forceinline__ unsigned fp8d_cluster_addr(const void* local, unsigned rank) {
  unsigned ra;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(ra) : "r"(static_cast<unsigned>(__cvta_generic_to_shared(local))), "r"(rank));
  return ra;
}
__device__ __forceinline__ void fp8d_st_cluster_v4(unsigned addr, float a, float b, float c, float d) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
}
#endif

extern "C" __global__ void __launch_bounds__(kThreads, 1)
#if FP8D_CFG_KCLUSTER > 1
    __cluster_dims__(1, FP8D_CFG_KCLUSTER, 1)
#endif
    fp8d_w8a16_wgmma(const __grid_constant__ Fp8dTensorMap tmx, const __grid_constant__ Fp8dTensorMap tmw,
                     const void* __restrict__ scale, const void* __restrict__ bias, int bias_kind,
                     unsigned short* __restrict__ y, float* __restrict__ part, int M, int N, int K) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const unsigned sbase = fp8d_smem_u32(smem), bars = sbase + kStages * kStage;
  // Tokens fastest: the CTAs in flight share few weight tiles (each read from HBM once, by every M tile from L2).
  const int m_tiles = (M + kBM - 1) / kBM;
  const int m0 = (blockIdx.x % m_tiles) * kBM, n0 = (blockIdx.x / m_tiles) * kBN;
  // Split K (gridDim.y > 1, the launcher's effective split: every slice has >= 1 step): this CTA's steps
  // [kt0, kt0 + k_tiles); its fp32 partial goes to part[blockIdx.y] and fp8d_w8a16_wgmma_reduce sums them.
  const int k_all = (K + kBK - 1) / kBK, per = (k_all + gridDim.y - 1) / gridDim.y;
  const int kt0 = blockIdx.y * per, k_tiles = min(per, k_all - kt0);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) fp8d_mbar_init(bars + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  // Launched programmatically (kernels_cuda._wgmma_gemm: in a CUDA graph, grids of one wave at M <= 512), this CTA
  // may start while the kernel before it still runs: the first stages' weight codes stream in meanwhile, x (possibly
  // that kernel's output) only after the wait.
  if (threadIdx.x == 0) {
    for (int s = 0; s < kLead && s < k_tiles; ++s)
      fp8d_issue_stage_codes(tmw, sbase + s * kStage, bars + 8 * s, kt0 + s, n0);
  }
  fp8d_wait_prior_grid();
  if (threadIdx.x == 0) {
    for (int s = 0; s < kLead && s < k_tiles; ++s)
      fp8d_issue_stage_x(tmx, sbase + s * kStage, bars + 8 * s, kt0 + s, m0);
  }

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int frag_row = (warp >> 2) * 64 + (warp & 3) * 16 + g;  // warpgroup, warp within it, lane group
  // Codes 2t, 2t + 1 and 8 + 2t, 9 + 2t of the 16-byte chunk kk (the A fragment's k columns) are in the words at
  // bytes 4 (t / 2) and 8 + 4 (t / 2); one byte_perm picks the halves. woff[kk]: the first word's offset in the code
  // tile, through the 64-byte swizzle (rows g and g + 8 share its phase).
  int woff[4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) woff[kk] = frag_row * kBK + ((kk ^ ((frag_row >> 1) & 3)) << 4) + 4 * (t >> 1);
  const unsigned sel = (t & 1) ? 0x7632u : 0x5410u;

  float acc[kBM / 2];
#pragma unroll
  for (int i = 0; i < kBM / 2; ++i) acc[i] = 0.f;
  unsigned a0[4][4], a1[4][4];
  // MX: this thread's rows' scale codes as 16-bit pairs (the two groups of one K step), one pair per register set.
  unsigned mx0[2] = {0u, 0u}, mx1[2] = {0u, 0u};
#if FP8D_CFG_DEPTH == 2
  unsigned a2[4][4], mx2[2] = {0u, 0u};
#endif
  // 16-bit pairs per scale row: K / 64 (MX needs K % 64 == 0); rows past N read row N - 1 (never stored).
  const unsigned short* mx_row0 =
      reinterpret_cast<const unsigned short*>(scale) + (long long)min(n0 + frag_row, N - 1) * (K / 64) + kt0;
  const unsigned short* mx_row1 =
      reinterpret_cast<const unsigned short*>(scale) + (long long)min(n0 + frag_row + 8, N - 1) * (K / 64) + kt0;
#if FP8D_WG_MX
  mx0[0] = mx_row0[0];
  mx0[1] = mx_row1[0];
  mx1[0] = mx_row0[min(1, k_tiles - 1)];
  mx1[1] = mx_row1[min(1, k_tiles - 1)];
#if FP8D_CFG_DEPTH == 2
  mx2[0] = mx_row0[min(2, k_tiles - 1)];
  mx2[1] = mx_row1[min(2, k_tiles - 1)];
#endif
#endif
  // Pairs of steps, then an odd last one: on every path a step writes the set the wgmmas in flight do not read
  // (a loop with a conditional second step would have a path that rewrites a0 under its own wgmmas, and ptxas then
  // serializes every wgmma: C7513).
  int kt = 0;
#if FP8D_CFG_DEPTH == 1
  for (; kt + 1 < k_tiles; kt += 2) {
    fp8d_k_step(acc, a0, smem, sbase, bars, kt, k_tiles, kt0, tmx, tmw, m0, n0, woff, sel, mx0, mx_row0, mx_row1);
    fp8d_k_step(acc, a1, smem, sbase, bars, kt + 1, k_tiles, kt0, tmx, tmw, m0, n0, woff, sel, mx1, mx_row0, mx_row1);
  }
  if (kt < k_tiles) fp8d_k_step(acc, a0, smem, sbase, bars, kt, k_tiles, kt0, tmx, tmw, m0, n0, woff, sel, mx0, mx_row0, mx_row1);
#else
  // Triples of steps over three sets, then one or two more (a0, then a1: the sets not in flight on either path).
  for (; kt + 2 < k_tiles; kt += 3) {
    fp8d_k_step(acc, a0, smem, sbase, bars, kt, k_tiles, kt0, tmx, tmw, m0, n0, woff, sel, mx0, mx_row0, mx_row1);
    fp8d_k_step(acc, a1, smem, sbase, bars, kt + 1, k_tiles, kt0, tmx, tmw, m0, n0, woff, sel, mx1, mx_row0, mx_row1);
    fp8d_k_step(acc, a2, smem, sbase, bars, kt + 2, k_tiles, kt0, tmx, tmw, m0, n0, woff, sel, mx2, mx_row0, mx_row1);
  }
  if (kt < k_tiles) {
    fp8d_k_step(acc, a0, smem, sbase, bars, kt, k_tiles, kt0, tmx, tmw, m0, n0, woff, sel, mx0, mx_row0, mx_row1);
    if (kt + 1 < k_tiles)
      fp8d_k_step(acc, a1, smem, sbase, bars, kt + 1, k_tiles, kt0, tmx, tmw, m0, n0, woff, sel, mx1, mx_row0,
                  mx_row1);
  }
#endif
  fp8d_wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < kBM / 2; ++i) fp8d_reg_fence(acc[i]);
  // The tokens of the tile this CTA writes out: all of them, or with slices summed in a cluster its part of them.
  int g_lo = 0, g_hi = kBM / 8;  // groups of 8 tokens (acc[4 j .. 4 j + 3] hold group j's)
#if FP8D_CFG_KCLUSTER > 1
  {
    // Reduce-scatter: slice r ends up with group range r of the tile summed over the slices. Each slice stores the
    // other slices' ranges of its accumulators into their shared memory (remote stores: no round trip), then adds
    // what it received to its own range in slice order (deterministic, the same sums whichever slice adds them).
    // Barrier 1: every slice is done with its pipeline's shared memory, which its peers write next; barrier 2: every
    // part has landed (release / acquire at cluster scope). No shared memory is touched across the cluster after it.
    constexpr int kS = FP8D_CFG_KCLUSTER, kNG = kBM / 8;
    const int me = blockIdx.y;  // the cluster spans the slices: rank = blockIdx.y
    g_lo = me * kNG / kS;
    g_hi = (me + 1) * kNG / kS;
    float4* recv = reinterpret_cast<float4*>(smem);  // [sender slot][group - g_lo][thread]
    fp8d_cluster_sync_all();
#pragma unroll
    for (int p = 0; p < kS; ++p) {
      if (p == me) continue;
      const int lo = p * kNG / kS, hi = (p + 1) * kNG / kS;
      const unsigned dst =
          fp8d_cluster_addr(recv + (me < p ? me : me - 1) * kClusterPart * kThreads + threadIdx.x, p);
#pragma unroll
      for (int j = 0; j < kNG; ++j)
        if (j >= lo && j < hi)
          fp8d_st_cluster_v4(dst + 16u * (j - lo) * kThreads, acc[4 * j], acc[4 * j + 1], acc[4 * j + 2],
                             acc[4 * j + 3]);
    }
    fp8d_cluster_sync_all();
#pragma unroll
    for (int j = 0; j < kNG; ++j) {
      if (j < g_lo || j >= g_hi) continue;
      float4 sum = make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
#pragma unroll
      for (int q = 0; q < kS; ++q) {
        const float4 v = q == me ? make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3])
                                 : recv[((q < me ? q : q - 1) * kClusterPart + j - g_lo) * kThreads + threadIdx.x];
        if (q == 0) {
          sum = v;
        } else {
          sum.x += v.x;
          sum.y += v.y;
          sum.z += v.z;
          sum.w += v.w;
        }
      }
      acc[4 * j] = sum.x;
      acc[4 * j + 1] = sum.y;
      acc[4 * j + 2] = sum.z;
      acc[4 * j + 3] = sum.w;
    }
  }
#endif
  const float* sw = reinterpret_cast<const float*>(scale);
  // Split K through global memory: the scaled fp32 partial, straight from the accumulators (32-byte segments a store).
  if (FP8D_CFG_KCLUSTER == 1 && gridDim.y > 1) {
    fp8d_allow_dependent_grid();
    float* dst = part + (long long)blockIdx.y * M * N;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = n0 + frag_row + 8 * h;
      if (n >= N) continue;
      const float s = FP8D_CFG_SCALE == FP8D_SCALE_ROW ? sw[n] : (FP8D_WG_MX ? 1.f : sw[0]);
#pragma unroll
      for (int j = 0; j < kBM / 8; ++j)
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int m = m0 + 8 * j + 2 * t + q;
          if (m < M) dst[(long long)m * N + n] = acc[4 * j + 2 * h + q] * s;
        }
    }
    return;
  }
  __syncthreads();  // every warp is done with the pipeline's shared memory: the staging tile reuses it
  fp8d_allow_dependent_grid();

  // Epilogue: scale (and bias) per weight row, bf16, staged as [token][weight row] for 16-byte stores.
  unsigned short* out = reinterpret_cast<unsigned short*>(smem);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int nl = frag_row + 8 * h, n = min(n0 + nl, N - 1);
    const float s = FP8D_CFG_SCALE == FP8D_SCALE_ROW ? sw[n] : (FP8D_WG_MX ? 1.f : sw[0]);
    const float b = bias_kind >= 0 ? fp8d_load_as_f32(bias, n, bias_kind) : 0.f;
#pragma unroll
    for (int j = 0; j < kBM / 8; ++j) {
      if (j < g_lo || j >= g_hi) continue;
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int ml = 8 * j + 2 * t + q;
        out[ml * kOutRow + nl] = fp8d_f32_to_bf16_bits(fmaf(acc[4 * j + 2 * h + q], s, b));
      }
    }
  }
  __syncthreads();
  constexpr int kChunks = kBN / 8;  // 16-byte chunks of one token's row
  const bool vec = (N % 8) == 0;
  for (int i = threadIdx.x; i < 8 * (g_hi - g_lo) * kChunks; i += kThreads) {
    const int ml = 8 * g_lo + i / kChunks, c = i % kChunks, m = m0 + ml, n = n0 + c * 8;
    if (m >= M || n >= N) continue;
    const unsigned short* src = out + ml * kOutRow + c * 8;
    unsigned short* dst = y + (long long)m * N + n;
    if (vec) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < 8 && n + e < N; ++e) dst[e] = src[e];
    }
  }
}

#endif

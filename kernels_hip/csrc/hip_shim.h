// hip_shim.h: the subset of the HIP device API our kernels use, for OFFLINE compilation only.
//
// Why: CI has clang-19 from Debian but no ROCm, so `clang-19 -x hip -nogpuinc -nogpulib` sees no
// hip_runtime.h. This header stands in for it (force-included with `-include hip_shim.h`), built only
// from clang builtins so that nothing needs ockl/ocml bitcode. At run time hipRTC provides the real
// HIP headers and this file is NOT used; kernels must therefore only use names that both define with
// the same meaning (threadIdx/blockIdx/blockDim/gridDim, __syncthreads, __launch_bounds__, the
// qualifiers, and the math functions below, which lower to the same LLVM intrinsics as HIP's ocml).
// Anything vendor-specific (fp8 conversion, shuffles, WMMA) lives in gfx12_fp8.h instead.
#pragma once

#if !defined(__HIP__) || !defined(__AMDGPU__)
#error "hip_shim.h is for clang -x hip device compilation for amdgcn (offline CI/ISA builds)"
#endif

#define __HIP_PLATFORM_AMD__ 1
#define FP8D_HIP_OFFLINE_SHIM 1

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
// HIP maps __launch_bounds__(max_threads[, min_waves_per_eu]) to these two attributes.
#define __fp8d_lb1(t) __attribute__((amdgpu_flat_work_group_size(1, t)))
#define __fp8d_lb2(t, w) __attribute__((amdgpu_flat_work_group_size(1, t), amdgpu_waves_per_eu(w)))
#define __fp8d_lb_pick(_1, _2, name, ...) name
#define __launch_bounds__(...) __fp8d_lb_pick(__VA_ARGS__, __fp8d_lb2, __fp8d_lb1)(__VA_ARGS__)

typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned short uint16_t;
typedef short int16_t;
typedef unsigned char uint8_t;
typedef signed char int8_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
typedef __SIZE_TYPE__ size_t;

// --- Thread geometry (HIP spells these with __declspec(property), as does its own header) ---------
#define __FP8D_DIM(Name, X, Y, Z)                                                   \
  struct Name {                                                                     \
    __device__ unsigned int __get_x() const { return X; }                           \
    __device__ unsigned int __get_y() const { return Y; }                           \
    __device__ unsigned int __get_z() const { return Z; }                           \
    __declspec(property(get = __get_x)) unsigned int x;                             \
    __declspec(property(get = __get_y)) unsigned int y;                             \
    __declspec(property(get = __get_z)) unsigned int z;                             \
  };
__FP8D_DIM(__fp8d_thread_idx, __builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(),
           __builtin_amdgcn_workitem_id_z())
__FP8D_DIM(__fp8d_block_idx, __builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(),
           __builtin_amdgcn_workgroup_id_z())
__FP8D_DIM(__fp8d_block_dim, __builtin_amdgcn_workgroup_size_x(), __builtin_amdgcn_workgroup_size_y(),
           __builtin_amdgcn_workgroup_size_z())
__FP8D_DIM(__fp8d_grid_dim, __builtin_amdgcn_grid_size_x() / __builtin_amdgcn_workgroup_size_x(),
           __builtin_amdgcn_grid_size_y() / __builtin_amdgcn_workgroup_size_y(),
           __builtin_amdgcn_grid_size_z() / __builtin_amdgcn_workgroup_size_z())
#undef __FP8D_DIM
static constexpr __device__ __fp8d_thread_idx threadIdx{};
static constexpr __device__ __fp8d_block_idx blockIdx{};
static constexpr __device__ __fp8d_block_dim blockDim{};
static constexpr __device__ __fp8d_grid_dim gridDim{};
#define warpSize 32  // wave32: the only mode our gfx12 kernels are built for (-mwavefrontsize64 is never used)

__device__ inline void __syncthreads() {
  // HIP: workgroup fence + s_barrier (release/acquire on LDS and global), exactly this pair.
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

// --- Vector types: HIP's are structs with x/y/z/w; ext_vector_type gives the same layout/alignment --
#define __FP8D_VEC(T, N, Name) typedef T Name __attribute__((ext_vector_type(N)));
__FP8D_VEC(unsigned int, 2, uint2) __FP8D_VEC(unsigned int, 4, uint4) __FP8D_VEC(int, 2, int2)
__FP8D_VEC(int, 4, int4) __FP8D_VEC(float, 2, float2) __FP8D_VEC(float, 4, float4)
__FP8D_VEC(unsigned short, 2, ushort2) __FP8D_VEC(unsigned short, 4, ushort4)
__FP8D_VEC(unsigned char, 4, uchar4)
#undef __FP8D_VEC
__device__ inline float2 make_float2(float a, float b) { return float2{a, b}; }
__device__ inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
__device__ inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
__device__ inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }

// --- Math: same LLVM intrinsics HIP's ocml wrappers reduce to for these (exact operations only) ----
__device__ inline float fabsf(float x) { return __builtin_fabsf(x); }
__device__ inline float fmaxf(float a, float b) { return __builtin_fmaxf(a, b); }
__device__ inline float fminf(float a, float b) { return __builtin_fminf(a, b); }
__device__ inline float fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
__device__ inline float ceilf(float x) { return __builtin_ceilf(x); }
__device__ inline float floorf(float x) { return __builtin_floorf(x); }
__device__ inline float rintf(float x) { return __builtin_rintf(x); }
__device__ inline float ldexpf(float x, int e) { return __builtin_ldexpf(x, e); }
__device__ inline float frexpf(float x, int* e) { return __builtin_frexpf(x, e); }
__device__ inline bool isnan(float x) { return __builtin_isnan(x); }
__device__ inline bool isinf(float x) { return __builtin_isinf(x); }
__device__ inline bool isfinite(float x) { return __builtin_isfinite(x); }
__device__ inline float __fdiv_rn(float a, float b) { return a / b; }  // HIP default: correctly rounded
__device__ inline int __float2int_rn(float x) { return (int)__builtin_rintf(x); }  // RNE (default mode)
__device__ inline float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
__device__ inline float __uint_as_float(unsigned x) { return __builtin_bit_cast(float, x); }
__device__ inline int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
__device__ inline unsigned __float_as_uint(float x) { return __builtin_bit_cast(unsigned, x); }
template <class T> __device__ inline T min(T a, T b) { return a < b ? a : b; }
template <class T> __device__ inline T max(T a, T b) { return a > b ? a : b; }
template <class T> __device__ inline T __ldg(const T* p) { return *p; }

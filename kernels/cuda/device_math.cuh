// Device helpers the kernels share: conversions to and from fp32 for the
// three element types, 16-byte vector loads and stores, and warp/block sums.
// Every kernel computes in fp32 whatever it reads and writes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/element_type.h"

namespace dslaunch::kernels::device {

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}

// Elements of T in one 16-byte access.
template <typename T>
inline constexpr int kVector = 16 / static_cast<int>(sizeof(T));

// `count` elements of T at p, loaded as fp32 (one 16- or 8-byte access when
// count elements make one; the pointer must then be aligned to it).
template <typename T, int kCount>
__device__ __forceinline__ void LoadAsFloat(const T* p, float (&out)[kCount]) {
  if constexpr (kCount * sizeof(T) == 16) {
    int4 raw = *reinterpret_cast<const int4*>(p);
    const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kCount; ++i) out[i] = ToFloat(v[i]);
  } else if constexpr (kCount * sizeof(T) == 8) {
    int2 raw = *reinterpret_cast<const int2*>(p);
    const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kCount; ++i) out[i] = ToFloat(v[i]);
  } else {
#pragma unroll
    for (int i = 0; i < kCount; ++i) out[i] = ToFloat(p[i]);
  }
}

template <typename T, int kCount>
__device__ __forceinline__ void StoreFromFloat(T* p, const float (&in)[kCount]) {
  if constexpr (kCount * sizeof(T) == 16) {
    int4 raw;
    T* v = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < kCount; ++i) v[i] = FromFloat<T>(in[i]);
    *reinterpret_cast<int4*>(p) = raw;
  } else if constexpr (kCount * sizeof(T) == 8) {
    int2 raw;
    T* v = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < kCount; ++i) v[i] = FromFloat<T>(in[i]);
    *reinterpret_cast<int2*>(p) = raw;
  } else {
#pragma unroll
    for (int i = 0; i < kCount; ++i) p[i] = FromFloat<T>(in[i]);
  }
}

__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ __forceinline__ float WarpMax(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `scratch` holds 32 floats of shared memory.
__device__ __forceinline__ float BlockSum(float x, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = WarpSum(x);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : 0.f;
  return WarpSum(x);
}

__host__ __device__ __forceinline__ bool Aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Whether rows of `width` elements of T at these pointers can be read and
// written with 16-byte accesses (launchers pick the vector kernel then).
template <typename T>
inline bool Vectorizable(int64_t width, std::initializer_list<const void*> pointers) {
  if (width % kVector<T> != 0) return false;
  for (const void* p : pointers) {
    if (!Aligned16(p)) return false;
  }
  return true;
}

}  // namespace dslaunch::kernels::device

// Instantiates a launcher body for the element type named at run time.
#define DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, ...)      \
  [&]() -> cudaError_t {                                  \
    switch (type) {                                       \
      case ::dslaunch::kernels::ElementType::kFloat32: {  \
        using T = float;                                  \
        return __VA_ARGS__();                             \
      }                                                   \
      case ::dslaunch::kernels::ElementType::kBFloat16: { \
        using T = __nv_bfloat16;                          \
        return __VA_ARGS__();                             \
      }                                                   \
      case ::dslaunch::kernels::ElementType::kFloat16: {  \
        using T = __half;                                 \
        return __VA_ARGS__();                             \
      }                                                   \
    }                                                     \
    return cudaErrorInvalidValue;                         \
  }()

#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/rotary.h"

namespace dslaunch::kernels {
namespace {

using device::FromFloat;
using device::ToFloat;

constexpr int kThreads = 256;

// One thread per pair (i, i + d/2); consecutive threads take consecutive i,
// then heads, then time, then batch: the order of a [batch, time, heads, d]
// buffer, so a warp reads adjacent elements.
template <typename T, bool kTranspose>
__global__ void rotary_kernel(T* y, const T* x, const T* cos, const T* sin, RotaryShape shape) {
  device::WaitForPreviousKernel();  // Note [Dependent launch]
  device::LetNextKernelStart();
  const int64_t half = shape.head_dim / 2;
  const int64_t pairs = shape.batch * shape.time * shape.heads * half;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = p % half;
    int64_t rest = p / half;
    const int64_t h = rest % shape.heads;
    rest /= shape.heads;
    const int64_t t = rest % shape.time;
    const int64_t b = rest / shape.time;
    const T* in = x + b * shape.in_strides[0] + h * shape.in_strides[1] + t * shape.in_strides[2];
    T* out = y + b * shape.out_strides[0] + h * shape.out_strides[1] + t * shape.out_strides[2];
    const int64_t table = b * shape.cos_batch_stride + t * shape.head_dim;
    const float x1 = ToFloat(in[i]), x2 = ToFloat(in[i + half]);
    const float c1 = ToFloat(cos[table + i]), c2 = ToFloat(cos[table + i + half]);
    const float s1 = ToFloat(sin[table + i]), s2 = ToFloat(sin[table + i + half]);
    if constexpr (kTranspose) {
      out[i] = FromFloat<T>(x1 * c1 + x2 * s2);
      out[i + half] = FromFloat<T>(x2 * c2 - x1 * s1);
    } else {
      out[i] = FromFloat<T>(x1 * c1 - x2 * s1);
      out[i + half] = FromFloat<T>(x2 * c2 + x1 * s2);
    }
  }
}

}  // namespace

cudaError_t rotary_apply(ElementType type, void* y, const void* x, const void* cos, const void* sin,
                         const RotaryShape& shape, bool transpose, cudaStream_t stream) {
  if (shape.head_dim <= 0 || shape.head_dim % 2 != 0) return cudaErrorInvalidValue;
  const int64_t pairs = shape.batch * shape.time * shape.heads * (shape.head_dim / 2);
  if (pairs <= 0) return pairs == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    const int grid = device::ResidentBlocks((pairs + kThreads - 1) / kThreads, /*per_sm=*/8);
    auto launch = [&](auto kernel) {
      return device::LaunchDependent(kernel, dim3(grid), dim3(kThreads), 0, stream, static_cast<T*>(y),
                                     static_cast<const T*>(x), static_cast<const T*>(cos),
                                     static_cast<const T*>(sin), shape);
    };
    return transpose ? launch(rotary_kernel<T, true>) : launch(rotary_kernel<T, false>);
  });
}

}  // namespace dslaunch::kernels

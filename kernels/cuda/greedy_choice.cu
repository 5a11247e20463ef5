#include <cmath>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/greedy_choice.h"

namespace dslaunch::kernels {
namespace {

using device::ToFloat;

constexpr int kThreads = 512;

// Whether (value, at) goes before (best, best_at): larger, NaN above
// everything, the smaller index among equals (and among NaNs).
__device__ __forceinline__ bool Before(float value, int64_t at, float best, int64_t best_at) {
  const bool value_nan = isnan(value), best_nan = isnan(best);
  if (value_nan || best_nan) return value_nan && (!best_nan || at < best_at);
  return value > best || (value == best && at < best_at);
}

__device__ __forceinline__ double WarpSumDouble(double x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) greedy_choice_kernel(double* out, const T* logits,
                                                                  const int64_t* row_index, int64_t rows,
                                                                  int64_t vocab, int64_t row_stride) {
  __shared__ float warp_best[32];
  __shared__ int64_t warp_best_at[32];
  __shared__ double warp_sums[32];
  device::WaitForPreviousKernel();  // Note [Dependent launch]
  device::LetNextKernelStart();
  const int64_t r = blockIdx.x;
  const T* row = logits + (row_index != nullptr ? row_index[r] : r) * row_stride;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;

  float best = -INFINITY;
  int64_t best_at = vocab;  // after every real index: the first value always goes before it
#pragma unroll 4
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) {
    const float value = ToFloat(row[c]);
    if (Before(value, c, best, best_at)) {
      best = value;
      best_at = c;
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, best, offset);
    const int64_t other_at = __shfl_xor_sync(0xffffffffu, best_at, offset);
    if (Before(other, other_at, best, best_at)) {
      best = other;
      best_at = other_at;
    }
  }
  if (lane == 0) {
    warp_best[warp] = best;
    warp_best_at[warp] = best_at;
  }
  __syncthreads();
  best = warp_best[0];
  best_at = warp_best_at[0];
  for (int w = 1; w < warps; ++w) {
    if (Before(warp_best[w], warp_best_at[w], best, best_at)) {
      best = warp_best[w];
      best_at = warp_best_at[w];
    }
  }

  // Every value widened to fp64 exactly, as row.to(double) does.
  const double maximum = static_cast<double>(best);
  double sum = 0.0;
#pragma unroll 4
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) sum += exp(static_cast<double>(ToFloat(row[c])) - maximum);
  sum = WarpSumDouble(sum);
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < warps; ++w) total += warp_sums[w];
    out[r] = static_cast<double>(best_at);
    // log_softmax at the argmax: (x - max) - log(sum) with x == max.
    out[rows + r] = (static_cast<double>(ToFloat(row[best_at])) - maximum) - log(total);
  }
}

}  // namespace

cudaError_t greedy_choice(ElementType type, double* out, const void* logits, const int64_t* row_index, int64_t rows,
                          int64_t vocab, int64_t row_stride, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (rows < 0 || rows > int64_t{0x7fffffff} || vocab <= 0 || row_stride < vocab) return cudaErrorInvalidValue;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    return device::LaunchDependent(greedy_choice_kernel<T>, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0,
                                   stream, out, static_cast<const T*>(logits), row_index, rows, vocab, row_stride);
  });
}

}  // namespace dslaunch::kernels

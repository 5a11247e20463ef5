#include <cmath>

#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/softmax_cross_entropy.h"

namespace dslaunch::kernels {
namespace {

using device::LoadAsFloat;
using device::StoreFromFloat;

constexpr int kThreads = 512;

// Running (max, Σ exp(x - max)) pairs, combined without overflow.
struct MaxSum {
  float max = -INFINITY;
  float sum = 0.f;
};

__device__ __forceinline__ MaxSum Combine(MaxSum a, MaxSum b) {
  if (a.max == -INFINITY) return b;
  if (b.max == -INFINITY) return a;
  MaxSum out;
  out.max = fmaxf(a.max, b.max);
  out.sum = a.sum * __expf(a.max - out.max) + b.sum * __expf(b.max - out.max);
  return out;
}

// One block per row.
template <typename T, int kVec>
__global__ void softmax_cross_entropy_forward_kernel(float* loss, float* lse, const T* logits, const int64_t* targets,
                                                     int64_t vocab) {
  __shared__ MaxSum warp_results[kThreads / 32];
  const int64_t row = blockIdx.x;
  const T* in = logits + row * vocab;
  MaxSum mine;
  for (int64_t c = static_cast<int64_t>(threadIdx.x) * kVec; c < vocab; c += static_cast<int64_t>(kThreads) * kVec) {
    float v[kVec];
    LoadAsFloat<T, kVec>(in + c, v);
    float vmax = v[0];
#pragma unroll
    for (int k = 1; k < kVec; ++k) vmax = fmaxf(vmax, v[k]);
    MaxSum part;
    part.max = vmax;
#pragma unroll
    for (int k = 0; k < kVec; ++k) part.sum += __expf(v[k] - vmax);
    mine = Combine(mine, part);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum other;
    other.max = __shfl_xor_sync(0xffffffffu, mine.max, offset);
    other.sum = __shfl_xor_sync(0xffffffffu, mine.sum, offset);
    mine = Combine(mine, other);
  }
  if (threadIdx.x % 32 == 0) warp_results[threadIdx.x / 32] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum all;
    for (int w = 0; w < kThreads / 32; ++w) all = Combine(all, warp_results[w]);
    const float row_lse = all.max + logf(all.sum);
    const int64_t target = targets[row];
    lse[row] = row_lse;
    loss[row] = target == kIgnoredTarget                ? 0.f
                : (target >= 0 && target < vocab) ? row_lse - device::ToFloat(in[target])
                                                  : NAN;
  }
}

template <typename T, int kVec>
__global__ void softmax_cross_entropy_backward_kernel(T* dlogits, const T* logits, const float* lse,
                                                      const int64_t* targets, const float* dloss, int64_t rows,
                                                      int64_t vocab) {
  const int64_t vectors_per_row = vocab / kVec;
  const int64_t vectors = rows * vectors_per_row;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = v / vectors_per_row;
    const int64_t c = (v - row * vectors_per_row) * kVec;
    const int64_t target = targets[row];
    const float row_lse = lse[row], scale = target == kIgnoredTarget ? 0.f : dloss[row];
    float x[kVec];
    LoadAsFloat<T, kVec>(logits + row * vocab + c, x);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      x[k] = (__expf(x[k] - row_lse) - (c + k == target ? 1.f : 0.f)) * scale;
    }
    StoreFromFloat<T, kVec>(dlogits + row * vocab + c, x);
  }
}

}  // namespace

cudaError_t softmax_cross_entropy_forward(ElementType type, float* loss, float* lse, const void* logits,
                                          const int64_t* targets, int64_t rows, int64_t vocab, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0 || rows > INT32_MAX) return rows == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    const auto grid = static_cast<unsigned>(rows);
    if (device::Vectorizable<T>(vocab, {logits})) {
      softmax_cross_entropy_forward_kernel<T, device::kVector<T>>
          <<<grid, kThreads, 0, stream>>>(loss, lse, static_cast<const T*>(logits), targets, vocab);
    } else {
      softmax_cross_entropy_forward_kernel<T, 1>
          <<<grid, kThreads, 0, stream>>>(loss, lse, static_cast<const T*>(logits), targets, vocab);
    }
    return cudaGetLastError();
  });
}

cudaError_t softmax_cross_entropy_backward(ElementType type, void* dlogits, const void* logits, const float* lse,
                                           const int64_t* targets, const float* dloss, int64_t rows, int64_t vocab,
                                           cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return rows == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    constexpr int kBackwardThreads = 256;
    auto launch = [&](auto kernel, int vec) {
      const int64_t vectors = rows * vocab / vec;
      const int grid = device::ResidentBlocks((vectors + kBackwardThreads - 1) / kBackwardThreads, /*per_sm=*/8);
      kernel<<<grid, kBackwardThreads, 0, stream>>>(static_cast<T*>(dlogits), static_cast<const T*>(logits), lse,
                                                    targets, dloss, rows, vocab);
      return cudaGetLastError();
    };
    return device::Vectorizable<T>(vocab, {dlogits, logits})
               ? launch(softmax_cross_entropy_backward_kernel<T, device::kVector<T>>, device::kVector<T>)
               : launch(softmax_cross_entropy_backward_kernel<T, 1>, 1);
  });
}

}  // namespace dslaunch::kernels

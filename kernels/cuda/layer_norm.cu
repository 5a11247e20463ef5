#include <algorithm>

#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/layer_norm.h"

namespace dslaunch::kernels {
namespace {

using device::LoadAsFloat;
using device::StoreFromFloat;
using device::AddToShared;
using device::WarpSum;

constexpr int kWarpsPerBlock = 8;

template <typename T, int kVec>
__global__ void layer_norm_forward_kernel(T* y, float* mean_out, float* rstd_out, const T* x, const T* weight,
                                          const T* bias, int64_t rows, int width, float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const T* in = x + row * width;
  float sum = 0.f;
  for (int c = lane * kVec; c < width; c += 32 * kVec) {
    float v[kVec];
    LoadAsFloat<T, kVec>(in + c, v);
#pragma unroll
    for (int i = 0; i < kVec; ++i) sum += v[i];
  }
  const float mean = WarpSum(sum) / width;
  float centred = 0.f;
  for (int c = lane * kVec; c < width; c += 32 * kVec) {
    float v[kVec];
    LoadAsFloat<T, kVec>(in + c, v);
#pragma unroll
    for (int i = 0; i < kVec; ++i) centred += (v[i] - mean) * (v[i] - mean);
  }
  const float rstd = rsqrtf(WarpSum(centred) / width + eps);
  T* out = y + row * width;
  for (int c = lane * kVec; c < width; c += 32 * kVec) {
    float v[kVec], w[kVec], b[kVec];
    LoadAsFloat<T, kVec>(in + c, v);
    LoadAsFloat<T, kVec>(weight + c, w);
    LoadAsFloat<T, kVec>(bias + c, b);
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = (v[i] - mean) * rstd * w[i] + b[i];
    StoreFromFloat<T, kVec>(out + c, v);
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// partial: [gridDim.x, 2 * width] (dweight sums, then dbias sums). Each warp
// keeps its own column sums in shared memory (a lane always touches the same
// columns, so no atomics); the block adds its warps' sums at the end.
template <typename T, int kVec>
__global__ void layer_norm_backward_kernel(T* dx, float* partial, const T* dy, const T* x, const T* weight,
                                           const float* mean, const float* rstd, int64_t rows, int width) {
  extern __shared__ float column_sums[];  // [warps][2 * width]
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < 2 * width * warps; i += blockDim.x) column_sums[i] = 0.f;
  __syncthreads();
  float* dweight_sums = column_sums + static_cast<int64_t>(warp) * 2 * width;
  float* dbias_sums = dweight_sums + width;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * warps + warp; row < rows;
       row += static_cast<int64_t>(gridDim.x) * warps) {
    const T* g = dy + row * width;
    const T* in = x + row * width;
    const float mu = mean[row], r = rstd[row];
    // dx = r · (ĝ - mean(ĝ) - x̂ · mean(ĝ · x̂)), ĝ = dy · weight.
    float sum_g = 0.f, sum_gx = 0.f;
    for (int c = lane * kVec; c < width; c += 32 * kVec) {
      float gv[kVec], xv[kVec], w[kVec], gx[kVec];
      LoadAsFloat<T, kVec>(g + c, gv);
      LoadAsFloat<T, kVec>(in + c, xv);
      LoadAsFloat<T, kVec>(weight + c, w);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float xhat = (xv[i] - mu) * r;
        sum_g += gv[i] * w[i];
        sum_gx += gv[i] * w[i] * xhat;
        gx[i] = gv[i] * xhat;
      }
      AddToShared<kVec>(dweight_sums + c, gx);
      AddToShared<kVec>(dbias_sums + c, gv);
    }
    const float mean_g = WarpSum(sum_g) / width, mean_gx = WarpSum(sum_gx) / width;
    T* out = dx + row * width;
    for (int c = lane * kVec; c < width; c += 32 * kVec) {
      float gv[kVec], xv[kVec], w[kVec];
      LoadAsFloat<T, kVec>(g + c, gv);
      LoadAsFloat<T, kVec>(in + c, xv);
      LoadAsFloat<T, kVec>(weight + c, w);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float xhat = (xv[i] - mu) * r;
        gv[i] = r * (gv[i] * w[i] - mean_g - xhat * mean_gx);
      }
      StoreFromFloat<T, kVec>(out + c, gv);
    }
  }
  __syncthreads();
  float* mine = partial + static_cast<int64_t>(blockIdx.x) * 2 * width;
  for (int i = threadIdx.x; i < 2 * width; i += blockDim.x) {
    float total = 0.f;
    for (int w = 0; w < warps; ++w) total += column_sums[static_cast<int64_t>(w) * 2 * width + i];
    mine[i] = total;
  }
}

}  // namespace

cudaError_t layer_norm_forward(ElementType type, void* y, float* mean, float* rstd, const void* x, const void* weight,
                               const void* bias, int64_t rows, int64_t width, float eps, cudaStream_t stream) {
  if (rows <= 0 || width <= 0 || width > (int64_t{1} << 30)) return rows == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    const int64_t grid = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
    const int w = static_cast<int>(width);
    if (device::Vectorizable<T>(width, {y, x, weight, bias})) {
      layer_norm_forward_kernel<T, device::kVector<T>><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
          static_cast<T*>(y), mean, rstd, static_cast<const T*>(x), static_cast<const T*>(weight),
          static_cast<const T*>(bias), rows, w, eps);
    } else {
      layer_norm_forward_kernel<T, 1><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
          static_cast<T*>(y), mean, rstd, static_cast<const T*>(x), static_cast<const T*>(weight),
          static_cast<const T*>(bias), rows, w, eps);
    }
    return cudaGetLastError();
  });
}

int64_t layer_norm_backward_scratch(int64_t rows, int64_t width) {
  return static_cast<int64_t>(device::PlanWarpColumnSums(rows, 2 * width, kWarpsPerBlock).blocks) * 2 * width;
}

cudaError_t layer_norm_backward(ElementType type, void* dx, void* dweight, void* dbias, const void* dy, const void* x,
                                const void* weight, const float* mean, const float* rstd, int64_t rows, int64_t width,
                                float* scratch, cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return cudaErrorInvalidValue;
  const device::WarpColumnSumsShape shape = device::PlanWarpColumnSums(rows, 2 * width, kWarpsPerBlock);
  if (shape.warps == 0) return cudaErrorInvalidValue;  // width beyond one block's shared memory
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    const int w = static_cast<int>(width);
    auto launch = [&](auto kernel) {
      return device::LaunchWarpColumnSums(kernel, shape, stream,
          static_cast<T*>(dx), scratch, static_cast<const T*>(dy), static_cast<const T*>(x),
          static_cast<const T*>(weight), mean, rstd, rows, w);
    };
    cudaError_t launched = device::Vectorizable<T>(width, {dx, dy, x, weight})
                               ? launch(layer_norm_backward_kernel<T, device::kVector<T>>)
                               : launch(layer_norm_backward_kernel<T, 1>);
    if (launched != cudaSuccess) return launched;
    // Scratch rows hold [dweight | dbias]: each half summed into its own output.
    launched = device::SumPartialRows(static_cast<T*>(dweight), scratch, shape.blocks, width, stream, 2 * width);
    if (launched != cudaSuccess) return launched;
    return device::SumPartialRows(static_cast<T*>(dbias), scratch + width, shape.blocks, width, stream, 2 * width);
  });
}

}  // namespace dslaunch::kernels

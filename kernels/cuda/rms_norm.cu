#include <algorithm>

#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/rms_norm.h"

namespace dslaunch::kernels {
namespace {

using device::AddToShared;
using device::FromFloat;
using device::LoadAsFloat;
using device::StoreFromFloat;
using device::ToFloat;
using device::WarpSum;

constexpr int kWarpsPerBlock = 8;

// h rounded to T, as LlamaRMSNorm's h.to(x.dtype) stores it.
template <typename T>
__device__ __forceinline__ float Rounded(float h) {
  return ToFloat(FromFloat<T>(h));
}

template <typename T, int kVec>
__global__ void rms_norm_forward_kernel(T* y, float* rstd_out, const T* x, const T* weight, int64_t rows, int width,
                                        float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const T* in = x + row * width;
  float squares = 0.f;
  for (int c = lane * kVec; c < width; c += 32 * kVec) {
    float v[kVec];
    LoadAsFloat<T, kVec>(in + c, v);
#pragma unroll
    for (int i = 0; i < kVec; ++i) squares += v[i] * v[i];
  }
  const float rstd = rsqrtf(WarpSum(squares) / width + eps);
  T* out = y + row * width;
  for (int c = lane * kVec; c < width; c += 32 * kVec) {
    float v[kVec], w[kVec];
    LoadAsFloat<T, kVec>(in + c, v);
    LoadAsFloat<T, kVec>(weight + c, w);
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = w[i] * Rounded<T>(v[i] * rstd);
    StoreFromFloat<T, kVec>(out + c, v);
  }
  if (lane == 0) rstd_out[row] = rstd;
}

// partial: [gridDim.x, width] dweight sums. Each warp keeps its own column
// sums in shared memory (a lane always touches the same columns: no atomics).
template <typename T, int kVec>
__global__ void rms_norm_backward_kernel(T* dx, float* partial, const T* dy, const T* x, const T* weight,
                                         const float* rstd, int64_t rows, int width) {
  extern __shared__ float column_sums[];  // [warps][width]
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < width * warps; i += blockDim.x) column_sums[i] = 0.f;
  __syncthreads();
  float* dweight_sums = column_sums + static_cast<int64_t>(warp) * width;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * warps + warp; row < rows;
       row += static_cast<int64_t>(gridDim.x) * warps) {
    const T* g = dy + row * width;
    const T* in = x + row * width;
    const float r = rstd[row];
    float sum_gh = 0.f;
    for (int c = lane * kVec; c < width; c += 32 * kVec) {
      float gv[kVec], xv[kVec], w[kVec], gh[kVec];
      LoadAsFloat<T, kVec>(g + c, gv);
      LoadAsFloat<T, kVec>(in + c, xv);
      LoadAsFloat<T, kVec>(weight + c, w);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float h = xv[i] * r;
        sum_gh += gv[i] * w[i] * h;
        gh[i] = gv[i] * Rounded<T>(h);
      }
      AddToShared<kVec>(dweight_sums + c, gh);
    }
    const float mean_gh = WarpSum(sum_gh) / width;
    T* out = dx + row * width;
    for (int c = lane * kVec; c < width; c += 32 * kVec) {
      float gv[kVec], xv[kVec], w[kVec];
      LoadAsFloat<T, kVec>(g + c, gv);
      LoadAsFloat<T, kVec>(in + c, xv);
      LoadAsFloat<T, kVec>(weight + c, w);
#pragma unroll
      for (int i = 0; i < kVec; ++i) gv[i] = r * (gv[i] * w[i] - xv[i] * r * mean_gh);
      StoreFromFloat<T, kVec>(out + c, gv);
    }
  }
  __syncthreads();
  float* mine = partial + static_cast<int64_t>(blockIdx.x) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    float total = 0.f;
    for (int w = 0; w < warps; ++w) total += column_sums[static_cast<int64_t>(w) * width + i];
    mine[i] = total;
  }
}

}  // namespace

cudaError_t rms_norm_forward(ElementType type, void* y, float* rstd, const void* x, const void* weight, int64_t rows,
                             int64_t width, float eps, cudaStream_t stream) {
  if (rows <= 0 || width <= 0 || width > (int64_t{1} << 30)) return rows == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    const int64_t grid = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
    const int w = static_cast<int>(width);
    if (device::Vectorizable<T>(width, {y, x, weight})) {
      rms_norm_forward_kernel<T, device::kVector<T>><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
          static_cast<T*>(y), rstd, static_cast<const T*>(x), static_cast<const T*>(weight), rows, w, eps);
    } else {
      rms_norm_forward_kernel<T, 1><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
          static_cast<T*>(y), rstd, static_cast<const T*>(x), static_cast<const T*>(weight), rows, w, eps);
    }
    return cudaGetLastError();
  });
}

int64_t rms_norm_backward_scratch(int64_t rows, int64_t width) {
  return static_cast<int64_t>(device::PlanWarpColumnSums(rows, width, kWarpsPerBlock).blocks) * width;
}

cudaError_t rms_norm_backward(ElementType type, void* dx, void* dweight, const void* dy, const void* x,
                              const void* weight, const float* rstd, int64_t rows, int64_t width, float* scratch,
                              cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return cudaErrorInvalidValue;
  const device::WarpColumnSumsShape shape = device::PlanWarpColumnSums(rows, width, kWarpsPerBlock);
  if (shape.warps == 0) return cudaErrorInvalidValue;  // width beyond one block's shared memory
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    const int w = static_cast<int>(width);
    auto launch = [&](auto kernel) {
      return device::LaunchWarpColumnSums(kernel, shape, stream,
          static_cast<T*>(dx), scratch, static_cast<const T*>(dy), static_cast<const T*>(x),
          static_cast<const T*>(weight), rstd, rows, w);
    };
    cudaError_t launched = device::Vectorizable<T>(width, {dx, dy, x, weight})
                               ? launch(rms_norm_backward_kernel<T, device::kVector<T>>)
                               : launch(rms_norm_backward_kernel<T, 1>);
    if (launched != cudaSuccess) return launched;
    return device::SumPartialRows(static_cast<T*>(dweight), scratch, shape.blocks, width, stream, width);
  });
}

}  // namespace dslaunch::kernels

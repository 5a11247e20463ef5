#include "kernels/cuda/bias_gelu.h"
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/device_math.cuh"

namespace dslaunch::kernels {
namespace {

using device::LoadAsFloat;
using device::StoreFromFloat;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

__device__ __forceinline__ float Gelu(float u) {
  return 0.5f * u * (1.f + tanhf(kSqrt2OverPi * (u + kCubic * u * u * u)));
}

__device__ __forceinline__ float GeluDerivative(float u) {
  const float t = tanhf(kSqrt2OverPi * (u + kCubic * u * u * u));
  return 0.5f * (1.f + t) + 0.5f * u * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kCubic * u * u);
}

template <typename T, int kVec>
__global__ void bias_gelu_forward_kernel(T* y, const T* x, const T* bias, int64_t rows, int64_t width) {
  const int64_t vectors = rows * width / kVec;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = v * kVec;
    float xv[kVec], b[kVec];
    LoadAsFloat<T, kVec>(x + i, xv);
    LoadAsFloat<T, kVec>(bias + i % width, b);  // width % kVec == 0: one row
#pragma unroll
    for (int k = 0; k < kVec; ++k) xv[k] = Gelu(xv[k] + b[k]);
    StoreFromFloat<T, kVec>(y + i, xv);
  }
}

// Block (32, kRowLanes): threadIdx.x picks kVec adjacent columns of a
// 32·kVec-wide tile (blockIdx.x), threadIdx.y strides over rows. Each block
// writes its column sums of dx as one row of `partial` [gridDim.y, width].
constexpr int kRowLanes = 8;

template <typename T, int kVec>
__global__ void bias_gelu_backward_kernel(T* dx, float* partial, const T* dy, const T* x, const T* bias, int64_t rows,
                                          int64_t width) {
  __shared__ float sums[kRowLanes][32 * kVec];
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * kVec;
  float column[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) column[k] = 0.f;
  if (c < width) {
    float b[kVec];
    LoadAsFloat<T, kVec>(bias + c, b);
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * kRowLanes + threadIdx.y; r < rows;
         r += static_cast<int64_t>(gridDim.y) * kRowLanes) {
      float g[kVec], xv[kVec];
      LoadAsFloat<T, kVec>(dy + r * width + c, g);
      LoadAsFloat<T, kVec>(x + r * width + c, xv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        g[k] *= GeluDerivative(xv[k] + b[k]);
        // The bias gradient sums what is stored: dx rounded to T.
        g[k] = device::ToFloat(device::FromFloat<T>(g[k]));
        column[k] += g[k];
      }
      StoreFromFloat<T, kVec>(dx + r * width + c, g);
    }
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) sums[threadIdx.y][threadIdx.x * kVec + k] = column[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < width) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      float total = 0.f;
      for (int l = 0; l < kRowLanes; ++l) total += sums[l][threadIdx.x * kVec + k];
      partial[static_cast<int64_t>(blockIdx.y) * width + c + k] = total;
    }
  }
}

// Row blocks of the backward grid: about four blocks per SM in all.
int BackwardRowBlocks(int64_t rows, int64_t column_tiles) {
  const int64_t row_groups = (rows + kRowLanes - 1) / kRowLanes;
  const int wanted = device::ResidentBlocks(row_groups * column_tiles, /*per_sm=*/4);
  const int64_t per_tile = (wanted + column_tiles - 1) / column_tiles;
  return static_cast<int>(per_tile < row_groups ? per_tile : row_groups);
}

int64_t ColumnTiles(int64_t width, int vec) { return (width + 32 * vec - 1) / (32 * vec); }

}  // namespace

cudaError_t bias_gelu_forward(ElementType type, void* y, const void* x, const void* bias, int64_t rows, int64_t width,
                              cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return rows == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    constexpr int kThreads = 256;
    auto launch = [&](auto kernel, int vec) {
      const int64_t vectors = rows * width / vec;
      const int grid = device::ResidentBlocks((vectors + kThreads - 1) / kThreads, /*per_sm=*/8);
      kernel<<<grid, kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), static_cast<const T*>(bias),
                                            rows, width);
      return cudaGetLastError();
    };
    return device::Vectorizable<T>(width, {y, x, bias})
               ? launch(bias_gelu_forward_kernel<T, device::kVector<T>>, device::kVector<T>)
               : launch(bias_gelu_forward_kernel<T, 1>, 1);
  });
}

int64_t bias_gelu_backward_scratch(int64_t rows, int64_t width) {
  // The widest vectors give the fewest column tiles and so the most row
  // blocks; size for them.
  return static_cast<int64_t>(BackwardRowBlocks(rows, ColumnTiles(width, 8))) * width;
}

cudaError_t bias_gelu_backward(ElementType type, void* dx, void* dbias, const void* dy, const void* x, const void* bias,
                               int64_t rows, int64_t width, float* scratch, cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return cudaErrorInvalidValue;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    auto launch = [&](auto kernel, int vec) {
      const int64_t tiles = ColumnTiles(width, vec);
      const int row_blocks = BackwardRowBlocks(rows, tiles);
      kernel<<<dim3(static_cast<unsigned>(tiles), row_blocks), dim3(32, kRowLanes), 0, stream>>>(
          static_cast<T*>(dx), scratch, static_cast<const T*>(dy), static_cast<const T*>(x),
          static_cast<const T*>(bias), rows, width);
      cudaError_t launched = cudaGetLastError();
      if (launched != cudaSuccess) return launched;
      return device::SumPartialRows(static_cast<T*>(dbias), scratch, row_blocks, width, stream, width);
    };
    return device::Vectorizable<T>(width, {dx, dy, x, bias})
               ? launch(bias_gelu_backward_kernel<T, device::kVector<T>>, device::kVector<T>)
               : launch(bias_gelu_backward_kernel<T, 1>, 1);
  });
}

}  // namespace dslaunch::kernels

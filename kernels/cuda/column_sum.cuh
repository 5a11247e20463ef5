// Column sums in two steps for kernels that reduce over rows (LayerNorm's
// weight and bias gradients, the bias gradient of bias+GELU): each block of
// the first kernel writes its partial sums as one row of a [blocks, width]
// fp32 scratch, and SumPartialRowsKernel adds those rows up in a fixed
// order, so the result does not depend on scheduling.
#pragma once

#include "kernels/cuda/device_math.cuh"

namespace dslaunch::kernels::device {

// out[c] = Σ_b partial[b * row_stride + c]. Block (32, kSumLanes): 32
// adjacent columns, each summed by kSumLanes threads over every kSumLanes-th
// row, then added in shared memory in a fixed order: many independent loads
// in flight instead of one thread walking hundreds of rows.
inline constexpr int kSumLanes = 16;

template <typename T>
__global__ void SumPartialRowsKernel(T* out, const float* partial, int blocks, int64_t width, int64_t row_stride) {
  __shared__ float sums[kSumLanes][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float sum = 0.f;
  if (c < width) {
    for (int b = threadIdx.y; b < blocks; b += kSumLanes) sum += partial[b * row_stride + c];
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < width) {
    float total = 0.f;
    for (int l = 0; l < kSumLanes; ++l) total += sums[l][threadIdx.x];
    out[c] = FromFloat<T>(total);
  }
}

template <typename T>
cudaError_t SumPartialRows(T* out, const float* partial, int blocks, int64_t width, cudaStream_t stream,
                           int64_t row_stride) {
  const int grid = static_cast<int>((width + 31) / 32);
  SumPartialRowsKernel<T><<<grid, dim3(32, kSumLanes), 0, stream>>>(out, partial, blocks, width, row_stride);
  return cudaGetLastError();
}

// dst[0..kCount) += add, in 16-byte shared-memory accesses when the count
// allows (a warp's 16-byte accesses go in conflict-free quarter-warp phases;
// 4-byte ones at a stride of kCount floats would collide on banks).
template <int kCount>
__device__ __forceinline__ void AddToShared(float* dst, const float (&add)[kCount]) {
  if constexpr (kCount % 4 == 0) {
#pragma unroll
    for (int q = 0; q < kCount / 4; ++q) {
      float4 v = reinterpret_cast<float4*>(dst)[q];
      v.x += add[4 * q];
      v.y += add[4 * q + 1];
      v.z += add[4 * q + 2];
      v.w += add[4 * q + 3];
      reinterpret_cast<float4*>(dst)[q] = v;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kCount; ++i) dst[i] += add[i];
  }
}

// Blocks that keep every SM busy for a grid-stride loop over `work` items.
inline int ResidentBlocks(int64_t work, int per_sm = 2) {
  int device = 0, sms = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int64_t wanted = static_cast<int64_t>(sms) * per_sm;
  return static_cast<int>(work < wanted ? (work > 0 ? work : 1) : wanted);
}

}  // namespace dslaunch::kernels::device

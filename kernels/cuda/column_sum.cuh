// Column sums in two steps for kernels that reduce over rows (LayerNorm's
// weight and bias gradients, the bias gradient of bias+GELU): each block of
// the first kernel writes its partial sums as one row of a [blocks, width]
// fp32 scratch, and SumPartialRowsKernel adds those rows up in a fixed
// order, so the result does not depend on scheduling.
#pragma once

#include <algorithm>

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

// The grid of a row-reduction backward kernel (LayerNorm, RMSNorm) whose
// warps each keep `floats_per_warp` column sums in dynamic shared memory:
// as many warps per block (up to max_warps) as the device's opt-in shared
// memory allows, and blocks to fill the device, two per SM at most (every
// block adds a row of partial sums that SumPartialRows must read back).
// warps == 0: one warp's sums do not fit.
struct WarpColumnSumsShape {
  int warps = 0, blocks = 0;
  size_t shared = 0;
};

inline WarpColumnSumsShape PlanWarpColumnSums(int64_t rows, int64_t floats_per_warp, int max_warps) {
  int device = 0, optin = 48 * 1024;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  const size_t per_warp = static_cast<size_t>(floats_per_warp) * sizeof(float);
  WarpColumnSumsShape shape;
  shape.warps = static_cast<int>(std::min<size_t>(max_warps, static_cast<size_t>(optin) / per_warp));
  if (shape.warps == 0) return shape;
  shape.shared = per_warp * shape.warps;
  const int per_sm = static_cast<int>(std::max<size_t>(1, std::min<size_t>(2, 200 * 1024 / shape.shared)));
  shape.blocks = ResidentBlocks((rows + shape.warps - 1) / shape.warps, per_sm);
  return shape;
}

// Launches `kernel` on that grid, raising its shared-memory limit first when
// the shape needs more than the default 48 KiB.
template <typename Kernel, typename... Args>
cudaError_t LaunchWarpColumnSums(Kernel kernel, const WarpColumnSumsShape& shape, cudaStream_t stream,
                                 Args... args) {
  if (shape.shared > 48 * 1024) {
    cudaError_t raised =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shape.shared));
    if (raised != cudaSuccess) return raised;
  }
  kernel<<<shape.blocks, 32 * shape.warps, shape.shared, stream>>>(args...);
  return cudaGetLastError();
}

}  // namespace dslaunch::kernels::device

#include <algorithm>

#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/dependent_launch.cuh"
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

// Below this many rows the forward gives each row a block instead of a warp:
// a decode step normalizes a row or a few, and one warp walking a 4096-wide
// row twice waits out the memory's latency at every step (17 us on an H100,
// against about 3 with the row spread over a block).
constexpr int64_t kBlockPerRowBelow = 1024;

// With a residual (delta and sum non-null) the row normalized is x + delta,
// rounded to T and stored to sum first (as LibTorch's add stores it); each
// thread reads back only what it wrote. rstd_out may be null. A row per warp
// (kWarpsPerBlock rows a block) or, kBlockPerRow, a row per block.
template <typename T, int kVec, bool kBlockPerRow>
__global__ void rms_norm_forward_kernel(T* y, float* rstd_out, T* sum, const T* x, const T* delta, const T* weight,
                                        int64_t rows, int width, float eps) {
  __shared__ float scratch[32];
  device::WaitForPreviousKernel();  // Note [Dependent launch]
  device::LetNextKernelStart();
  const int64_t row = kBlockPerRow ? static_cast<int64_t>(blockIdx.x)
                                   : static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // a whole warp, or (kBlockPerRow: one block a row) nobody
  const int lane = kBlockPerRow ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x % 32);
  const int lanes = kBlockPerRow ? static_cast<int>(blockDim.x) : 32;
  const T* in = x + row * width;
  float squares = 0.f;
  for (int c = lane * kVec; c < width; c += lanes * kVec) {
    float v[kVec];
    LoadAsFloat<T, kVec>(in + c, v);
    if (delta != nullptr) {
      float d[kVec];
      LoadAsFloat<T, kVec>(delta + row * width + c, d);
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[i] = Rounded<T>(v[i] + d[i]);
      StoreFromFloat<T, kVec>(sum + row * width + c, v);
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i) squares += v[i] * v[i];
  }
  if constexpr (kBlockPerRow) {
    squares = device::BlockSum(squares, scratch);
  } else {
    squares = WarpSum(squares);
  }
  const float rstd = rsqrtf(squares / width + eps);
  if (delta != nullptr) in = sum + row * width;
  T* out = y + row * width;
  for (int c = lane * kVec; c < width; c += lanes * kVec) {
    float v[kVec], w[kVec];
    LoadAsFloat<T, kVec>(in + c, v);
    LoadAsFloat<T, kVec>(weight + c, w);
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = w[i] * Rounded<T>(v[i] * rstd);
    StoreFromFloat<T, kVec>(out + c, v);
  }
  if (lane == 0 && rstd_out != nullptr) rstd_out[row] = rstd;
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

namespace {

cudaError_t LaunchForward(ElementType type, void* y, float* rstd, void* sum, const void* x, const void* delta,
                          const void* weight, int64_t rows, int64_t width, float eps, cudaStream_t stream) {
  if (rows <= 0 || width <= 0 || width > (int64_t{1} << 30)) return rows == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    const int w = static_cast<int>(width);
    const bool block_per_row = rows < kBlockPerRowBelow;
    auto launch = [&](auto kernel, int vec) {
      // A row per block: a thread per vector of the row, 32 to 1024 of them.
      const int64_t vectors = (width + vec - 1) / vec;
      const int threads = block_per_row ? static_cast<int>(std::clamp<int64_t>((vectors + 31) / 32 * 32, 32, 1024))
                                        : 32 * kWarpsPerBlock;
      const int64_t grid = block_per_row ? rows : (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
      return device::LaunchDependent(kernel, dim3(static_cast<unsigned>(grid)), dim3(threads), 0, stream,
                                     static_cast<T*>(y), rstd, static_cast<T*>(sum), static_cast<const T*>(x),
                                     static_cast<const T*>(delta), static_cast<const T*>(weight), rows, w, eps);
    };
    // Null pointers (no residual) are aligned.
    constexpr int kVec = device::kVector<T>;
    if (device::Vectorizable<T>(width, {y, sum, x, delta, weight})) {
      return block_per_row ? launch(rms_norm_forward_kernel<T, kVec, true>, kVec)
                           : launch(rms_norm_forward_kernel<T, kVec, false>, kVec);
    }
    return block_per_row ? launch(rms_norm_forward_kernel<T, 1, true>, 1)
                         : launch(rms_norm_forward_kernel<T, 1, false>, 1);
  });
}

}  // namespace

cudaError_t rms_norm_forward(ElementType type, void* y, float* rstd, const void* x, const void* weight, int64_t rows,
                             int64_t width, float eps, cudaStream_t stream) {
  return LaunchForward(type, y, rstd, nullptr, x, nullptr, weight, rows, width, eps, stream);
}

cudaError_t rms_norm_residual_forward(ElementType type, void* y, void* sum, const void* x, const void* delta,
                                      const void* weight, int64_t rows, int64_t width, float eps,
                                      cudaStream_t stream) {
  if (sum == nullptr || delta == nullptr) return cudaErrorInvalidValue;
  return LaunchForward(type, y, nullptr, sum, x, delta, weight, rows, width, eps, stream);
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

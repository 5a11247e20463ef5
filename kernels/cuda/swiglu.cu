#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/swiglu.h"

namespace dslaunch::kernels {
namespace {

using device::LoadAsFloat;
using device::StoreFromFloat;

constexpr int kThreads = 256;

__device__ __forceinline__ float Sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

// Grid-stride over vectors of kVec elements; elements % kVec == 0.
template <typename T, int kVec>
__global__ void swiglu_forward_kernel(T* y, const T* gate, const T* up, int64_t elements) {
  device::WaitForPreviousKernel();  // Note [Dependent launch]
  device::LetNextKernelStart();
  const int64_t vectors = elements / kVec;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float g[kVec], u[kVec];
    LoadAsFloat<T, kVec>(gate + v * kVec, g);
    LoadAsFloat<T, kVec>(up + v * kVec, u);
#pragma unroll
    for (int k = 0; k < kVec; ++k) g[k] = g[k] * Sigmoid(g[k]) * u[k];
    StoreFromFloat<T, kVec>(y + v * kVec, g);
  }
}

template <typename T, int kVec>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dy, const T* gate, const T* up, int64_t elements) {
  const int64_t vectors = elements / kVec;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float d[kVec], g[kVec], u[kVec], dg[kVec], du[kVec];
    LoadAsFloat<T, kVec>(dy + v * kVec, d);
    LoadAsFloat<T, kVec>(gate + v * kVec, g);
    LoadAsFloat<T, kVec>(up + v * kVec, u);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float s = Sigmoid(g[k]);
      du[k] = d[k] * g[k] * s;
      dg[k] = d[k] * u[k] * s * (1.f + g[k] * (1.f - s));
    }
    StoreFromFloat<T, kVec>(dgate + v * kVec, dg);
    StoreFromFloat<T, kVec>(dup + v * kVec, du);
  }
}

// The stacked form: row i of gate_up is gate_i (cols) then up_i (cols);
// cols % kVec == 0. Vector v is row v / (cols / kVec).
template <typename T, int kVec>
__global__ void swiglu_stacked_forward_kernel(T* y, const T* gate_up, int64_t rows, int64_t cols) {
  device::WaitForPreviousKernel();  // Note [Dependent launch]
  device::LetNextKernelStart();
  const int64_t per_row = cols / kVec, vectors = rows * per_row;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = v / per_row, col = (v - row * per_row) * kVec;
    const T* gate = gate_up + row * 2 * cols + col;
    float g[kVec], u[kVec];
    LoadAsFloat<T, kVec>(gate, g);
    LoadAsFloat<T, kVec>(gate + cols, u);
#pragma unroll
    for (int k = 0; k < kVec; ++k) g[k] = g[k] * Sigmoid(g[k]) * u[k];
    StoreFromFloat<T, kVec>(y + row * cols + col, g);
  }
}

template <typename T, int kVec>
__global__ void swiglu_stacked_backward_kernel(T* dgate_up, const T* dy, const T* gate_up, int64_t rows,
                                               int64_t cols) {
  const int64_t per_row = cols / kVec, vectors = rows * per_row;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = v / per_row, col = (v - row * per_row) * kVec, in = row * 2 * cols + col;
    float d[kVec], g[kVec], u[kVec], dg[kVec], du[kVec];
    LoadAsFloat<T, kVec>(dy + row * cols + col, d);
    LoadAsFloat<T, kVec>(gate_up + in, g);
    LoadAsFloat<T, kVec>(gate_up + in + cols, u);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float s = Sigmoid(g[k]);
      du[k] = d[k] * g[k] * s;
      dg[k] = d[k] * u[k] * s * (1.f + g[k] * (1.f - s));
    }
    StoreFromFloat<T, kVec>(dgate_up + in, dg);
    StoreFromFloat<T, kVec>(dgate_up + in + cols, du);
  }
}

template <typename Kernel>
int Grid(Kernel, int64_t vectors) {
  return device::ResidentBlocks((vectors + kThreads - 1) / kThreads, /*per_sm=*/8);
}

}  // namespace

cudaError_t swiglu_forward(ElementType type, void* y, const void* gate, const void* up, int64_t elements,
                           cudaStream_t stream) {
  if (elements <= 0) return elements == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    auto launch = [&](auto kernel, int vec) {
      return device::LaunchDependent(kernel, dim3(Grid(kernel, elements / vec)), dim3(kThreads), 0, stream,
                                     static_cast<T*>(y), static_cast<const T*>(gate), static_cast<const T*>(up),
                                     elements);
    };
    return device::Vectorizable<T>(elements, {y, gate, up})
               ? launch(swiglu_forward_kernel<T, device::kVector<T>>, device::kVector<T>)
               : launch(swiglu_forward_kernel<T, 1>, 1);
  });
}

cudaError_t swiglu_backward(ElementType type, void* dgate, void* dup, const void* dy, const void* gate, const void* up,
                            int64_t elements, cudaStream_t stream) {
  if (elements <= 0) return elements == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    auto launch = [&](auto kernel, int vec) {
      kernel<<<Grid(kernel, elements / vec), kThreads, 0, stream>>>(
          static_cast<T*>(dgate), static_cast<T*>(dup), static_cast<const T*>(dy), static_cast<const T*>(gate),
          static_cast<const T*>(up), elements);
      return cudaGetLastError();
    };
    return device::Vectorizable<T>(elements, {dgate, dup, dy, gate, up})
               ? launch(swiglu_backward_kernel<T, device::kVector<T>>, device::kVector<T>)
               : launch(swiglu_backward_kernel<T, 1>, 1);
  });
}

cudaError_t swiglu_stacked_forward(ElementType type, void* y, const void* gate_up, int64_t rows, int64_t cols,
                                   cudaStream_t stream) {
  if (rows < 0 || cols < 0) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    auto launch = [&](auto kernel, int vec) {
      return device::LaunchDependent(kernel, dim3(Grid(kernel, rows * cols / vec)), dim3(kThreads), 0, stream,
                                     static_cast<T*>(y), static_cast<const T*>(gate_up), rows, cols);
    };
    return device::Vectorizable<T>(cols, {y, gate_up})
               ? launch(swiglu_stacked_forward_kernel<T, device::kVector<T>>, device::kVector<T>)
               : launch(swiglu_stacked_forward_kernel<T, 1>, 1);
  });
}

cudaError_t swiglu_stacked_backward(ElementType type, void* dgate_up, const void* dy, const void* gate_up,
                                    int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows < 0 || cols < 0) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] {
    auto launch = [&](auto kernel, int vec) {
      kernel<<<Grid(kernel, rows * cols / vec), kThreads, 0, stream>>>(
          static_cast<T*>(dgate_up), static_cast<const T*>(dy), static_cast<const T*>(gate_up), rows, cols);
      return cudaGetLastError();
    };
    return device::Vectorizable<T>(cols, {dgate_up, dy, gate_up})
               ? launch(swiglu_stacked_backward_kernel<T, device::kVector<T>>, device::kVector<T>)
               : launch(swiglu_stacked_backward_kernel<T, 1>, 1);
  });
}

}  // namespace dslaunch::kernels

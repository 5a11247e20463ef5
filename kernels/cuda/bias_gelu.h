// Fused bias + GELU (tanh approximation, GPT-2's): y = gelu(x + bias) for
// x [rows, width] (a linear layer's output before its bias) and bias
// [width], fp32/bf16/fp16, computed in fp32. One pass instead of an add and a
// GELU; backward needs only x and bias (x + bias is recomputed, not stored).
//
//   gelu(u)  = 0.5·u·(1 + tanh(k·(u + 0.044715·u³))),  k = sqrt(2/π)
//   gelu'(u) = 0.5·(1 + t) + 0.5·u·(1 - t²)·k·(1 + 3·0.044715·u²),  t = tanh(...)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/element_type.h"

namespace dslaunch::kernels {

cudaError_t bias_gelu_forward(ElementType type, void* y, const void* x, const void* bias, int64_t rows, int64_t width,
                              cudaStream_t stream);

int64_t bias_gelu_backward_scratch(int64_t rows, int64_t width);

// dx = dy · gelu'(x + bias); dbias = Σ_rows dx (overwritten).
cudaError_t bias_gelu_backward(ElementType type, void* dx, void* dbias, const void* dy, const void* x, const void* bias,
                               int64_t rows, int64_t width, float* scratch, cudaStream_t stream);

}  // namespace dslaunch::kernels

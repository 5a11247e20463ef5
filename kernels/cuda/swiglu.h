// Fused SwiGLU, the gated activation of Llama's MLP: y = silu(gate) · up,
// elementwise over two tensors of one shape, fp32, bf16 or fp16, computed in
// fp32 and rounded once (LibTorch rounds silu(gate) to the type first; the
// difference is within one rounding). Backward reads gate, up and dy once
// and writes both gradients:
//   dgate = dy · up · s · (1 + gate · (1 - s)),  s = sigmoid(gate)
//   dup   = dy · gate · s
// The stacked form reads gate and up as the two halves of each row of one
// [rows, 2·cols] tensor (a gate/up product made by one matrix product,
// Note [Stacked projections]): y is [rows, cols], and backward writes the
// gradient of that tensor whole, so neither side copies or splits it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/element_type.h"

namespace dslaunch::kernels {

cudaError_t swiglu_forward(ElementType type, void* y, const void* gate, const void* up, int64_t elements,
                           cudaStream_t stream);

cudaError_t swiglu_backward(ElementType type, void* dgate, void* dup, const void* dy, const void* gate, const void* up,
                            int64_t elements, cudaStream_t stream);

cudaError_t swiglu_stacked_forward(ElementType type, void* y, const void* gate_up, int64_t rows, int64_t cols,
                                   cudaStream_t stream);

cudaError_t swiglu_stacked_backward(ElementType type, void* dgate_up, const void* dy, const void* gate_up,
                                    int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace dslaunch::kernels

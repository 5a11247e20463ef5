// Fused LayerNorm over the last dimension (torch.nn.LayerNorm's arithmetic:
// biased variance, y = (x - mean) * rsqrt(var + eps) * weight + bias), for
// fp32, bf16 or fp16 activations and parameters of the same type. Statistics
// and every sum are fp32.
//
// Forward: one warp per row, three passes over a row that stays in L1 (sum,
// centred sum of squares, output); writes y and the row's mean and rstd for
// backward. Backward: one warp per row computes dx, and adds dy·x̂ and dy to
// its own column sums in shared memory (2·width floats per warp, so widths up
// to ~28K on Hopper); each block writes its warps' total, and a second kernel
// adds the blocks up (column_sum.cuh). Rows are read with 16-byte accesses when the width and
// pointers allow it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/element_type.h"

namespace dslaunch::kernels {

cudaError_t layer_norm_forward(ElementType type, void* y, float* mean, float* rstd, const void* x, const void* weight,
                               const void* bias, int64_t rows, int64_t width, float eps, cudaStream_t stream);

// fp32 scratch elements layer_norm_backward needs for these sizes.
int64_t layer_norm_backward_scratch(int64_t rows, int64_t width);

// dweight and dbias are overwritten (not accumulated into).
cudaError_t layer_norm_backward(ElementType type, void* dx, void* dweight, void* dbias, const void* dy, const void* x,
                                const void* weight, const float* mean, const float* rstd, int64_t rows, int64_t width,
                                float* scratch, cudaStream_t stream);

}  // namespace dslaunch::kernels

// Fused RMSNorm over the last dimension with Hugging Face's LlamaRMSNorm
// arithmetic: h = x · rsqrt(mean(x²) + eps) in fp32, rounded to the input's
// type, then y = weight · h (rounded again), for fp32, bf16 or fp16
// activations and a weight of the same type. Statistics and sums are fp32.
//
// Forward: one warp per row (a block per row below 1024 rows: a decode
// step's few), two passes over a row that stays in L1 (sum of squares,
// output); writes y and the row's rstd for backward. The residual
// form (inference: no rstd) first adds delta to x, rounds the sum to the
// type and stores it, and normalizes that: a decoder layer's residual add
// and the next RMSNorm in one kernel, with the unfused pair's arithmetic. Backward: one
// warp per row computes dx = rstd · (ĝ - h · mean(ĝ · h)), ĝ = dy · weight,
// and adds dy · h (h rounded as forward stored it) to its own column sums in
// shared memory (width floats per warp); a second kernel adds the blocks up
// (column_sum.cuh), so dweight does not depend on scheduling.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/element_type.h"

namespace dslaunch::kernels {

cudaError_t rms_norm_forward(ElementType type, void* y, float* rstd, const void* x, const void* weight, int64_t rows,
                             int64_t width, float eps, cudaStream_t stream);

// sum = x + delta (rounded to the type), y = RMSNorm(sum); x, delta, sum and y
// [rows, width]; sum may not alias x or delta.
cudaError_t rms_norm_residual_forward(ElementType type, void* y, void* sum, const void* x, const void* delta,
                                      const void* weight, int64_t rows, int64_t width, float eps,
                                      cudaStream_t stream);

// fp32 scratch elements rms_norm_backward needs for these sizes.
int64_t rms_norm_backward_scratch(int64_t rows, int64_t width);

// dweight is overwritten (not accumulated into).
cudaError_t rms_norm_backward(ElementType type, void* dx, void* dweight, const void* dy, const void* x,
                              const void* weight, const float* rstd, int64_t rows, int64_t width, float* scratch,
                              cudaStream_t stream);

}  // namespace dslaunch::kernels

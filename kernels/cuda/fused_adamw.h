// Fused multi-tensor Adam/AdamW: one launch steps many tensors. Each tensor
// has an fp32 master copy, fp32 moments, a gradient in fp32, bf16 or fp16,
// and optionally a 16-bit (or fp32) copy of the parameter that the step
// rewrites from the new master (the model's own weights under mixed
// precision), so gradients are never copied up and masters never copied down
// in separate passes. The arithmetic is LibTorch's Adam/AdamW, in fp32, with
// the per-step scalars rounded once from double (Note [CPU Adam formula] in
// kernels/cpu_adam.h); the gradient is multiplied by grad_scale first (the
// engine's unscale-and-clip coefficient).
//
// The tensors are described by two device tables that the caller builds
// once (PlanAdamWChunks) and reuses while the addresses stay the same: the
// tensors, and chunks of at most kAdamWChunkElements of one tensor each; a
// block steps one chunk at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/element_type.h"
#include "kernels/cuda/fused_adamw_types.h"

namespace dslaunch::kernels {

// `tensors` and `chunks` are device pointers.
cudaError_t fused_adamw(const AdamWTensor* tensors, const AdamWChunk* chunks, int chunk_count, ElementType grad_type,
                        ElementType param_type, const AdamWHyperparameters& h, cudaStream_t stream);

// Σ grad² over every tensor's gradient, into *out (one fp64 on the device):
// fp32 within a chunk, fp64 across chunks. `partials` holds chunk_count
// floats of device scratch. Inf and NaN propagate.
cudaError_t adamw_grad_sum_squares(const AdamWTensor* tensors, const AdamWChunk* chunks, int chunk_count,
                                   ElementType grad_type, float* partials, double* out, cudaStream_t stream);

}  // namespace dslaunch::kernels

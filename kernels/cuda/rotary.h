// Fused rotary position embedding in Hugging Face's rotate-half convention,
// for x [batch, heads, time, head_dim] in any layout whose last dimension is
// contiguous (the projections' [batch, time, heads, head_dim] transposed):
//   y[i]     = x[i]·cos[i]         - x[i + d/2]·sin[i]
//   y[i+d/2] = x[i+d/2]·cos[i+d/2] + x[i]·sin[i + d/2]        (i < d/2)
// cos and sin are [time, head_dim] (cos_batch_stride 0) or one table per
// sequence [batch, time, head_dim] (packed records, stride time·head_dim),
// in x's type. Computed in fp32, rounded once. The backward pass is the
// transposed rotation of dy (`transpose`):
//   dx[i]     = dy[i]·cos[i]         + dy[i + d/2]·sin[i + d/2]
//   dx[i+d/2] = dy[i+d/2]·cos[i+d/2] - dy[i]·sin[i]
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/element_type.h"

namespace dslaunch::kernels {

struct RotaryShape {
  int64_t batch = 0, heads = 0, time = 0, head_dim = 0;
  // Element strides of x and y over batch, heads and time (head_dim: 1).
  int64_t in_strides[3] = {0, 0, 0};
  int64_t out_strides[3] = {0, 0, 0};
  int64_t cos_batch_stride = 0;
};

cudaError_t rotary_apply(ElementType type, void* y, const void* x, const void* cos, const void* sin,
                         const RotaryShape& shape, bool transpose, cudaStream_t stream);

}  // namespace dslaunch::kernels

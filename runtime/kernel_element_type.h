// The CUDA kernels' element type (kernels/cuda/element_type.h) of a LibTorch
// dtype, for the code that hands tensors to the kernels.
#pragma once

#include <torch/torch.h>

#include "kernels/cuda/element_type.h"

namespace dslaunch::runtime {

// Throws c10::Error naming `what` for dtypes the kernels do not take.
inline kernels::ElementType KernelElementType(torch::ScalarType type, const char* what) {
  switch (type) {
    case torch::kFloat:
      return kernels::ElementType::kFloat32;
    case torch::kBFloat16:
      return kernels::ElementType::kBFloat16;
    case torch::kHalf:
      return kernels::ElementType::kFloat16;
    default:
      TORCH_CHECK(false, what, ": the fused kernels take float, bfloat16 or half tensors, not ", type);
  }
}

}  // namespace dslaunch::runtime

// The LibTorch side of the fused multi-tensor AdamW kernel
// (kernels/cuda/fused_adamw.h): describes tensors to it and launches one step
// for all of them on the current CUDA stream.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "kernels/cuda/fused_adamw_types.h"

namespace dslaunch::runtime {

// One tensor to step: fp32 master and moments (contiguous, same numel), its
// gradient (fp32, bf16 or fp16; every entry the same dtype) and optionally
// the model's own copy of the parameter (one dtype for every entry), which
// the step rewrites from the new master.
struct FusedAdamWEntry {
  torch::Tensor master, grad, exp_avg, exp_avg_sq, param;
};

// Whether this build can step CUDA tensors with the fused kernel.
bool FusedAdamWAvailable();

// One launch for every entry. Throws c10::Error on a malformed entry.
void FusedAdamWStep(const std::vector<FusedAdamWEntry>& entries, const kernels::AdamWHyperparameters& h);

// Σ grad² over the entries' gradients (fp32 within chunks of 64K elements,
// fp64 across them), as a one-element fp64 tensor on the device.
torch::Tensor FusedGradSumSquares(const std::vector<FusedAdamWEntry>& entries);

}  // namespace dslaunch::runtime

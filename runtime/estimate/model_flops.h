// Note [Model FLOPs]
// What one trained token costs in matmul FLOPs, and what a GPU could do:
// the two halves of model FLOP utilisation (MFU), which dsrank prints beside
// tokens/s on a GPU.
// Per token: every parameter takes part in a forward multiply-add (2 FLOPs)
// and in the backward product that carries the gradient to the layer's
// input (2); only trainable parameters also take the product that makes
// their own gradient (2). Attention's scores and weighted sum add 12·L·d·T
// (forward and backward, L layers of width d over a sequence of T; PaLM's
// appendix B). Full training gives the usual 6N + 12·L·d·T; LoRA costs 4
// per frozen parameter. Activation checkpointing's recomputation is not
// counted (model FLOPs, not hardware FLOPs).
#pragma once

#include <string>

#include "runtime/estimate/model_size.h"

namespace dslaunch::runtime {

double ModelFlopsPerToken(const ModelSize& size);

// The dense bf16/fp16 tensor-core peak of a GPU from the name CUDA reports
// ("NVIDIA H200" → 989.4e12, the datasheet's figure without sparsity), or 0
// for a GPU this table does not know.
double PeakTensorFlops(const std::string& device_name);

}  // namespace dslaunch::runtime

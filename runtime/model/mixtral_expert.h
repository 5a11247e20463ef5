// Mixtral's expert (Hugging Face's MixtralBlockSparseTop2MLP), the expert a
// Llama-family model builds its mixture-of-experts layers from:
// w2(silu(w1(x)) · w3(x)), no biases (w1: gate, w3: up, w2: down).
//
// Its projections are LoraLinear (Note [LoRA]), so a LoRA target "w1", "w2"
// or "w3" (or "all-linear") adapts every expert as PEFT adapts Mixtral's:
// one adapter per expert, named "...experts.<e>.w1.lora_A.weight". An
// expert's adapters are expert parameters like its weights (Note [Mixture of
// experts]): held by its expert-parallel rank only, their gradients reduced
// over its expert-data-parallel group, drawn from the expert's own
// generator (ApplyLora) so they start the same at every expert-parallel size.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "runtime/model/lora_linear.h"
#include "runtime/moe/expert_mlp.h"

namespace dslaunch::runtime {

class MixtralExpert : public ExpertMlp {
 public:
  // `fused_kernels`: SwiGLU through fused_ops.h's kernels and the
  // projections' base products through the decode kernel, as the dense MLP's.
  MixtralExpert(int64_t hidden, int64_t inner, bool fused_kernels);
  torch::Tensor forward(const torch::Tensor& rows) override;

  LoraLinear w1{nullptr}, w2{nullptr}, w3{nullptr};

 private:
  bool fused_;
};

}  // namespace dslaunch::runtime

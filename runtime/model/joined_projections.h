// Note [Joined projections]: for generation, projections that read the same
// input (a Llama layer's q/k/v, and its gate/up) become one matrix product.
// A decode step at batch 1 reads every weight once and is bound by memory
// and by the count of kernels; one product over the rows of three (or two)
// weights is one launch instead of three, and a longer read.
//
// The weights move into one tensor [Σ rows, in]; each projection's weight
// (and bias) becomes a view of its rows, so no memory is added and the
// per-projection path (training, the state dict, exports, the probe's
// training forward) reads the same values. The joined product is used only
// while it is still right: under no gradient (its weight is not a
// parameter, so autograd would give the projections nothing), with no
// adapter or int8 weight added to any of them since, and with each
// projection's weight still a view of the joined tensor (a Module::to or a
// weight replaced by set_data ends it, and the per-projection path runs).
#pragma once

#include <vector>

#include <torch/torch.h>

#include "runtime/model/lora_linear.h"

namespace dslaunch::runtime {

class JoinedProjections {
 public:
  // Joins `projections` (one input width) when each is plain (no adapter, not
  // int8) and all or none have a bias; otherwise leaves them as they are.
  // Returns whether it joined.
  bool Join(std::vector<LoraLinear> projections);
  // Whether Forward may run now (see the note).
  bool usable() const;
  // Each projection's output for x [..., in], in Join's order: views of one
  // product's output [..., Σ rows] (the last dimension contiguous).
  std::vector<torch::Tensor> Forward(const torch::Tensor& x) const;
  // That product whole: the outputs side by side along the last dimension.
  torch::Tensor Product(const torch::Tensor& x) const;

 private:
  std::vector<LoraLinear> projections_;
  torch::Tensor weight_, bias_;
  bool fused_kernels_ = false;  // the projections' (Note [Decode linear])
};

}  // namespace dslaunch::runtime

// Note [Stacked projections]
// In training, projections that read the same input (a Llama layer's q/k/v,
// its gate/up) run as one matrix product over their weights concatenated for
// this step, [Σ out, in]: one GEMM instead of several (the narrow key/value
// products of grouped-query attention run badly alone) and, backward, one
// input gradient instead of several summed pass by pass. The weights stay
// separate parameters (state dict, ZeRO units, exports, LoRA targets). The
// stacked copy lives for the forward product only: backward reads the
// weights themselves (so ZeRO-3 still releases them between uses, and a
// frozen 7B base is not held twice), computes the input's gradient as one
// buffer each weight's product accumulates into, and each weight's gradient
// from its columns of the output's.
//
// LoRA adapters (Note [LoRA]) join the same way: their A products are one
// product over the A's concatenated when no dropout is drawn (otherwise one
// per adapter, each on its own mask as PEFT draws them, in the projections'
// order), and their B products accumulate into the base product in place,
// one GEMM with beta 1 through a block-diagonal B whose blocks are each
// adapter's B (a projection without one has an empty block). So an adapted
// projection costs no elementwise pass: no scaled copy, no add.
//
// Only while autograd records (training): under no gradient (generation,
// evaluation) the model runs the projections apart or through generation's
// joined weights (Note [Joined projections]), one tensor the projections'
// weights are views of, so that a decode step never copies the weights it
// reads.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "runtime/model/lora_linear.h"
#include "runtime/tensor_parallel/tensor_parallel_group.h"

namespace dslaunch::runtime {

// Whether StackedProduct can run `projections`: at least one; none int8;
// one input width, dtype and device; biases on all or none.
bool Stackable(const std::vector<LoraLinear>& projections);

// Each projection's output for x [..., in] side by side along the last
// dimension, [..., Σ out], as forward would give it (contiguous). Over a
// split tensor group the projections are column-parallel slices and x is
// the whole input: an adapter's A is whole, its gradient summed across the
// group (Note [LoRA under tensor parallelism]). REQUIRES: Stackable.
torch::Tensor StackedProduct(const std::vector<LoraLinear>& projections, const torch::Tensor& x,
                             const TensorParallelGroup& group);

// The product of a column-parallel region's input with `weights` stacked
// [Σ out, in] (plus `biases`, on all or none): `input` is this rank's view of
// the region's input, [batch, time, in] (under sequence parallelism its
// chunk of the sequence), and the result [batch, time, Σ out] covers the
// whole sequence. The region's entry and the product are one autograd step
// whose backward sums the input's gradient across the group while it
// computes the weights' (Note [Overlapped input-gradient reduction]); with a
// group of one, a plain stacked product over the rows.
torch::Tensor ColumnParallelProduct(const torch::Tensor& input, const std::vector<torch::Tensor>& weights,
                                    const std::vector<torch::Tensor>& biases, const TensorParallelGroup& group,
                                    bool fused_kernels);

// StackedProduct of a column-parallel region's input as ColumnParallelProduct
// takes it: the projections' weights through ColumnParallelProduct, or when
// an adapter reads the input too, the region entered apart
// (EnterColumnParallel) and then StackedProduct. REQUIRES: Stackable.
torch::Tensor ColumnParallelStackedProduct(const std::vector<LoraLinear>& projections, const torch::Tensor& input,
                                           const TensorParallelGroup& group);

}  // namespace dslaunch::runtime

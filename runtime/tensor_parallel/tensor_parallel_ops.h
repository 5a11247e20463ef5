// The collectives of tensor and sequence parallelism as autograd functions
// (Note [Tensor parallelism]). Each is the identity with a group of one.
// Activations are [batch, time, ...]: the sequence is dimension 1.
//
// They run in forward on the caller's thread and in backward on autograd's,
// in the same order on every rank of the group (the graphs are the same), so
// the group's communicator is never used by two threads at once as long as
// nothing else uses it during forward and backward.
#pragma once

#include <torch/torch.h>

#include "runtime/tensor_parallel/tensor_parallel_group.h"

namespace dslaunch::runtime {

// Megatron's four primitives.
// Identity forward; the gradient all-reduced (sum) backward.
torch::Tensor CopyToTensorParallelRegion(const torch::Tensor& x, const TensorParallelGroup& group);
// All-reduce (sum) forward; identity backward.
torch::Tensor ReduceFromTensorParallelRegion(const torch::Tensor& x, const TensorParallelGroup& group);
// All-gather along the sequence forward; reduce-scatter (sum) backward.
torch::Tensor GatherFromSequenceParallelRegion(const torch::Tensor& x, const TensorParallelGroup& group);
// Reduce-scatter (sum) along the sequence forward; all-gather backward.
torch::Tensor ReduceScatterToSequenceParallelRegion(const torch::Tensor& x, const TensorParallelGroup& group);
// All-gather along the last dimension forward (each rank's slice in rank
// order); this rank's slice of the gradient backward. Megatron's
// gather_from_tensor_model_parallel_region.
torch::Tensor GatherFromTensorParallelRegion(const torch::Tensor& x, const TensorParallelGroup& group);

// What a layer writes, choosing by group.sequence_parallel:
// the input of column-parallel layers: the whole activation on every rank
// (Copy, or Gather of the sequence chunks).
torch::Tensor EnterColumnParallel(const torch::Tensor& x, const TensorParallelGroup& group);
// The partial outputs of row-parallel layers summed: the whole activation
// (Reduce), or this rank's sequence chunk of it (ReduceScatter).
torch::Tensor ExitRowParallel(const torch::Tensor& partial, const TensorParallelGroup& group);
// Megatron's ColumnParallelLinear: y = x·Wᵀ + b with this rank's rows of W
// and b (the output dimension split, one part), the input entering the
// column-parallel region (its gradient summed across the group backward).
// `gather_output`: every rank gets the whole output (all-gathered along the
// last dimension; refused under sequence parallelism, as Megatron refuses
// it); else this rank's slice, for a row-parallel layer to take.
torch::Tensor ColumnParallelLinear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                   const TensorParallelGroup& group, bool gather_output);

// A replicated parameter that each rank's backward reaches only in part (a
// norm weight under sequence parallelism; a key/value projection that ranks
// share under grouped-query attention): its gradient is all-reduced across
// the group, so every rank holds the whole gradient. Identity otherwise.
torch::Tensor ReplicatedWithPartialGradient(const torch::Tensor& parameter, const TensorParallelGroup& group);
// A replicated parameter used where activations are split along the
// sequence (a norm's weight, a row-parallel bias, the position embedding):
// ReplicatedWithPartialGradient under sequence parallelism, else itself.
// Undefined stays undefined.
torch::Tensor SequenceRegionParameter(const torch::Tensor& parameter, const TensorParallelGroup& group);

// Test builds prove the parity tests can fail (Note [Tensor parallelism]):
// with kColumnInputGradient every column-parallel region keeps this rank's
// partial input gradient instead of the group's sum; with
// kReplicatedParameterGradient every ReplicatedWithPartialGradient keeps
// this rank's part. Process-wide.
enum class BrokenReduction { kNone, kColumnInputGradient, kReplicatedParameterGradient };
void BreakReductionForTesting(BrokenReduction broken);

}  // namespace dslaunch::runtime

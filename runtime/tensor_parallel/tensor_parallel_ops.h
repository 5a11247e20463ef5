// The collectives of tensor and sequence parallelism as autograd functions
// (Note [Tensor parallelism]). Each is the identity with a group of one.
// Activations are [batch, time, ...]: the sequence is dimension 1.
//
// They run in forward on the caller's thread and in backward on autograd's
// (an input-gradient reduction on the CPU on the group's worker, waited for
// before its autograd step returns: Note [Overlapped input-gradient
// reduction]), in the same order on every rank of the group (the graphs are
// the same), so the group's communicator is never used by two threads at
// once as long as nothing else uses it during forward and backward.
#pragma once

#include <optional>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "runtime/tensor_parallel/tensor_parallel_group.h"
#include "runtime/torch_compat.h"

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

// Note [Overlapped input-gradient reduction]
// Megatron's asynchronous tensor-parallel backward: the gradient of a
// column-parallel product's input is this rank's part of a sum over the
// group, and the sum (an all-reduce; under sequence parallelism a
// reduce-scatter along the sequence) needs nothing that the product's weight
// gradient computes. So the product starts the reduction as soon as its
// input gradient is computed, computes its weights' and biases' gradients
// while the reduction runs, and waits for it only then. On a GPU the
// autograd thread itself queues the collective, on a high-priority side
// stream that waits for the gradient (Note [Comm stream]): queued before
// the weight GEMMs, it starts first and runs beside them (a worker thread
// would queue it only after a wake-up, usually behind the GEMMs), and the
// compute stream waits for it at the end; NCCL calls do not block the host.
// On the CPU, where a Gloo collective runs on the calling thread, it runs on
// the group's worker thread (TensorParallelGroup::worker). Without a worker
// (generation, serving: no backward) it runs inline.
//
// The choice of order has to be made inside one autograd step: LibTorch's
// linear computes both of its gradients in one node, and an entry kept apart
// from the product (CopyToTensorParallelRegion, GatherFromSequence...)
// reduces only after that node, with nothing left to overlap. So
// ColumnParallelProduct (runtime/model/stacked_projections.h) is the
// region's entry and its product as one step. It serves wherever a region's
// input feeds one product: GPT's qkv and fc, Llama's stacked q/k/v and
// gate/up, and the vocabulary-parallel heads (the largest weight gradient of
// all). Where LoRA adapters read the region's input too, the base weight is
// frozen and has no gradient to overlap, so the entry stays apart (one
// reduction for the base product and the adapters); so does the entry of
// attention whose key/value heads are replicated (its projections run
// apart).

// This rank's view of a column-parallel region's input made whole for a
// product that reduces its input gradient itself (InputGradientReduction):
// all-gathered along the sequence under sequence parallelism, else `x`.
// Records no autograd step: for the forward of such a product.
torch::Tensor WholeRegionInput(const torch::Tensor& x, const TensorParallelGroup& group);

// One input gradient being summed across the group (Note [Overlapped
// input-gradient reduction]).
class InputGradientReduction {
 public:
  // Starts summing `grad`, this rank's part of the gradient of a region's
  // whole input [batch, time, ...]: with a worker, on a side stream (CUDA)
  // or the worker's thread (CPU); else here and now. REQUIRES: a group of
  // more than one.
  InputGradientReduction(const torch::Tensor& grad, Communicator* comm, CommWorker* worker, bool sequence_parallel);
  InputGradientReduction(const InputGradientReduction&) = delete;
  InputGradientReduction& operator=(const InputGradientReduction&) = delete;
  // Waits for a reduction never finished (an error between start and
  // finish): the collective owns its buffers until it is done.
  ~InputGradientReduction();

  // The sum: the whole gradient, or under sequence parallelism this rank's
  // chunk of the sequence. Waits for it; throws naming the collective when
  // it failed. Call once.
  torch::Tensor Finish();

 private:
  const bool sequence_parallel_;
  torch::Tensor input_;   // what the collective reads (the all-reduce: in place)
  torch::Tensor output_;  // where the sum lands
  std::optional<CommTicket> ticket_;  // on the worker's thread
  std::optional<compat::StreamPoint> side_done_;  // on a side stream: where it ends
  absl::Status inline_status_;
  bool finished_ = false;
};

// Test builds prove the parity tests can fail (Note [Tensor parallelism]):
// with kColumnInputGradient every column-parallel region keeps this rank's
// partial input gradient instead of the group's sum; with
// kReplicatedParameterGradient every ReplicatedWithPartialGradient keeps
// this rank's part. Process-wide.
enum class BrokenReduction { kNone, kColumnInputGradient, kReplicatedParameterGradient };
void BreakReductionForTesting(BrokenReduction broken);

}  // namespace dslaunch::runtime

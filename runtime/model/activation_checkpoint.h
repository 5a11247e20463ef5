// Activation checkpointing by recomputation (DeepSpeed's
// `activation_checkpointing`): a checkpointed segment keeps only its input
// during forward and runs again, with gradients, in backward. LibTorch's C++
// frontend has no torch.utils.checkpoint, so this is a custom autograd
// function around any `Tensor(Tensor)` segment.
#pragma once

#include <functional>

#include <torch/torch.h>

#include "runtime/model/dropout_stream.h"
#include "runtime/tensor_parallel/tensor_parallel_group.h"

namespace dslaunch::runtime {

using Segment = std::function<torch::Tensor(const torch::Tensor&)>;

// Where a checkpointed segment's input waits for backward.
struct CheckpointStorage {
  // DeepSpeed's cpu_checkpointing: in host memory.
  bool on_cpu = false;
  // DeepSpeed's partition_activations (Note [Partitioned activations]): an
  // input replicated across this group keeps 1/T on each rank and is
  // all-gathered before the recomputation. Not split: kept whole.
  TensorParallelGroup partition_over;
};

// A model's storage: partitioned over `group` when `partition` is asked for
// and the activations between layers are replicated (not under sequence
// parallelism, where each rank's input is its own chunk already).
CheckpointStorage ModelCheckpointStorage(bool on_cpu, bool partition, const TensorParallelGroup& group);

// y = segment(x), storing only x (as `storage` says) and recomputing the
// segment in backward. The random state of x's device (its default
// generator) and of `stream` (when given) is restored for the
// recomputation, so dropout draws the same masks (Note [Dropout streams]).
// The segment is kept with the autograd node until backward, so it may
// capture per-call state (a pipeline keeps several micro-batches in flight).
torch::Tensor CheckpointedForward(Segment segment, const torch::Tensor& x, const CheckpointStorage& storage,
                                  DropoutStream* stream = nullptr);

}  // namespace dslaunch::runtime

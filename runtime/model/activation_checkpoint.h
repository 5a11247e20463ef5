// Activation checkpointing by recomputation (DeepSpeed's
// `activation_checkpointing`): a checkpointed segment keeps only its input
// during forward and runs again, with gradients, in backward. LibTorch's C++
// frontend has no torch.utils.checkpoint, so this is a custom autograd
// function around any `Tensor(Tensor)` segment.
#pragma once

#include <functional>

#include <torch/torch.h>

#include "runtime/model/dropout_stream.h"

namespace dslaunch::runtime {

using Segment = std::function<torch::Tensor(const torch::Tensor&)>;

// y = segment(x), storing only x (in host memory when `input_to_cpu`, DeepSpeed's
// cpu_checkpointing) and recomputing the segment in backward. The random
// state of x's device (its default generator) and of `stream` (when given)
// is restored for the recomputation, so dropout draws the same masks
// (Note [Dropout streams]).
// The segment is kept with the autograd node until backward, so it may
// capture per-call state (a pipeline keeps several micro-batches in flight).
torch::Tensor CheckpointedForward(Segment segment, const torch::Tensor& x, bool input_to_cpu,
                                  DropoutStream* stream = nullptr);

}  // namespace dslaunch::runtime

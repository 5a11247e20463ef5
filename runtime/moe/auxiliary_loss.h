// How a mixture-of-experts layer's auxiliary losses reach the gradient
// (Note [Mixture of experts]) without being returned through every block.
//
// The model's training loss goes through RecordLossGradientScale, whose
// backward notes the gradient the loss received (the engine's 1/gas and
// loss scale). Each layer attaches its weighted auxiliary loss to its output
// with AttachAuxiliaryLoss: the identity on the output, whose backward gives
// the auxiliary loss that same gradient, as if it had been added to the
// training loss. Backward reaches the loss before any layer, so the scale is
// always this backward's. A recomputed (activation-checkpointed) layer
// attaches again in its recomputation, so its auxiliary gradient is not lost.
#pragma once

#include <torch/torch.h>

namespace dslaunch::runtime {

// One per model: what the last backward's loss received.
struct LossGradientScale {
  torch::Tensor scale;  // a scalar; undefined until a backward reaches the loss
};

// Identity forward; backward stores the incoming gradient in `cell` (which
// must outlive the graph) and passes it on.
torch::Tensor RecordLossGradientScale(const torch::Tensor& loss, LossGradientScale* cell);

// Identity on `output` forward; backward passes the output's gradient on and
// gives `auxiliary_loss` (a scalar) the gradient `cell` holds: recorded by
// the model's Loss, or set by a pipeline stage (Note [Experts in pipeline
// stages], runtime/pipeline/pipeline_engine.h). Fails in backward when
// neither gave one.
torch::Tensor AttachAuxiliaryLoss(const torch::Tensor& output, const torch::Tensor& auxiliary_loss,
                                  LossGradientScale* cell);

}  // namespace dslaunch::runtime

// What the runtime needs from a model family (Note [Model interface]).
//
// Note [Model interface]
// The engine and the parallel axes never name an architecture. A family
// (GPT here; Llama and MoE models next) is a torch::nn::Module that also
// implements ModelInterface, and is built by name through the registry
// (model_registry.h), so adding a family touches runtime/model/ and nothing
// else. What a family declares:
//   - its parameter units (PartitionedModel): how ZeRO-3 gathers it;
//   - its layer list, in forward order, each with the parameters it owns:
//     what a pipeline cuts into stages (partition_method parameters,
//     uniform or type:REGEX on the layer types);
//   - its tied parameters: one tensor used by several layers (a GPT's token
//     embedding is also its output head); a pipeline that puts those layers
//     on different stages keeps the copies equal;
//   - its tensor-parallel forms: which weights split by output (column),
//     by input (row) or by vocabulary; every other parameter is replicated.
// Every parameter name is one of the module's named_parameters().
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "runtime/model/dropout_stream.h"
#include "runtime/model/parameter_units.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"

namespace dslaunch::runtime {

struct LossGradientScale;  // runtime/moe/auxiliary_loss.h

struct ModelLayer {
  std::string name;  // "embedding", "blocks.3", "head"
  std::string type;  // what partition_method type:REGEX matches: "Embedding", "GptBlock", "Head"
  std::vector<std::string> parameters;  // owned by this layer (a tied one by its first user)
};

struct TiedParameter {
  std::string parameter;            // the owner's name for it
  std::vector<std::string> layers;  // every layer that uses it, the owner first
};

// One micro-batch of next-token prediction. Text batches are tokens and
// targets; instruction batches (runtime/data/instruction_samples.h) packed
// several records into a row also carry each token's position within its
// record and the record it belongs to, so that attention stays inside it.
struct TokenBatch {
  torch::Tensor tokens;     // [batch, time] int64
  torch::Tensor targets;    // [batch, time] int64; -100: no loss
  torch::Tensor positions;  // [batch, time] int64, or undefined: 0 .. time-1 in every row
  torch::Tensor segments;   // [batch, time] int64: 1, 2, ... per record, 0 on padding; or undefined: one per row
};

// How a family draws its initial weights: writes parameter `name`'s value
// as one process holds it (the unsplit tensor, fp32) into `whole`. Called
// once per parameter in named_parameters() order (InitializeSlices): the
// values may depend on the order (one generator draws them all).
using ParameterFill = std::function<void(const std::string& name, torch::Tensor& whole)>;

class ModelInterface : public PartitionedModel {
 public:
  // "gpt".
  virtual std::string family() const = 0;
  // Forward order; together they own every trainable parameter exactly once.
  virtual std::vector<ModelLayer> Layers() const = 0;
  virtual std::vector<TiedParameter> TiedParameters() const = 0;
  virtual std::vector<TensorParallelForm> TensorParallelForms() const = 0;
  // Mean next-token cross-entropy: tokens and targets [batch, time] int64.
  virtual torch::Tensor Loss(const torch::Tensor& tokens, const torch::Tensor& targets) = 0;
  // The same for a batch that may hold packed records (positions and
  // segments defined); a family without attention masks refuses those.
  virtual torch::Tensor BatchLoss(const TokenBatch& batch) {
    TORCH_CHECK(!batch.positions.defined() && !batch.segments.defined(), "model family ", family(),
                " cannot train on packed records (set data.packing: false)");
    return Loss(batch.tokens, batch.targets);
  }
  virtual int64_t ParameterCount() const = 0;
  // Note [Pipeline stages]: runs layers [first, last] (indices into
  // Layers()) on one micro-batch. `input` is layer first-1's output
  // (ignored when first == 0: the embedding reads batch.tokens). Returns
  // layer last's output, or, when last is the final layer, the mean loss
  // over batch.targets as BatchLoss computes it. Touches no parameter of the
  // other layers, which a pipeline stage has released. Every stage sees the
  // whole micro-batch (positions and segments shape the attention of every
  // layer).
  virtual torch::Tensor ForwardLayers(int first, int last, const torch::Tensor& input, const TokenBatch& batch) = 0;
  // The shape of what any layer but the last outputs for `batch` (in the
  // compute dtype): what a pipeline stage expects to receive.
  virtual std::vector<int64_t> ActivationShape(const TokenBatch& batch) const = 0;
  // Where the model's dropout masks come from (Note [Dropout streams]); the
  // trainer seeds it per model replica and moves it to each step. None: the
  // model draws no dropout masks.
  virtual DropoutStream* dropout_stream() { return nullptr; }
  // Where a recomputed segment's input is kept (activation_checkpointing's
  // cpu_checkpointing and partition_activations over the model's tensor
  // group): the model's own recomputation and a pipeline's
  // activation_checkpoint_interval segments use it.
  virtual CheckpointStorage RecomputeStorage() const { return {}; }
  // Note [Shard-only loading]: a fresh copy of the fill the constructor drew
  // this model's weights with for `seed` (the same sequence again), so a
  // model built deferred can have its values drawn where they are kept
  // (SeededParameterSource); empty: the family cannot say.
  virtual ParameterFill InitialValues(uint64_t seed) const { return {}; }
  // Note [Experts in pipeline stages] (runtime/pipeline/pipeline_engine.h),
  // for a family with mixture-of-experts layers: the cell whose scale their
  // auxiliary losses take as gradient in backward (null: none), and the
  // weighted auxiliary losses (summed, detached, kDouble) of the layers the
  // ForwardLayers calls since the last take ran in training (undefined:
  // none). ForwardLayers' loss (the head's) holds neither.
  virtual LossGradientScale* auxiliary_loss_gradient() { return nullptr; }
  virtual torch::Tensor TakeAuxiliaryLoss() { return {}; }
};

// Helpers the families share.

// "PREFIX" + the name of each of `module`'s parameters, in parameters() order.
std::vector<std::string> ParameterNamesUnder(const torch::nn::Module& module, const std::string& prefix);

// Activation checkpointing of `checkpointed` evenly spaced layers of `layers`
// (DeepSpeed's number_checkpoints; >= layers: all): whether layer `layer` is
// one of them (the layers where floor(i·k/L) steps up).
bool IsCheckpointedLayer(int64_t layer, int64_t checkpointed, int64_t layers);

// Sets every parameter of `module` to this rank's slice (per `forms`; a
// parameter without a form is whole) of the tensor `fill(name, whole)` writes
// into `whole`, a float tensor of the shape one process would hold: so a
// model split over any tensor-parallel group starts from the same weights as
// one built whole from the same seed. `fill` sees the parameters in
// named_parameters() order.
void InitializeSlices(torch::nn::Module& module, const std::vector<TensorParallelForm>& forms,
                      const TensorParallelGroup& group, const ParameterFill& fill);

// The shape one process holds of a parameter whose slice on a rank of a
// group of `size` has `local` shape (`form` null: the parameter is whole).
std::vector<int64_t> UnsplitShape(std::vector<int64_t> local, const TensorParallelForm* form, int size);

// Elements of every parameter of `module`.
int64_t CountParameters(const torch::nn::Module& module);

}  // namespace dslaunch::runtime

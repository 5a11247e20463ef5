// A GPT in LibTorch's C++ frontend: token and position embeddings, pre-
// LayerNorm blocks (causal self-attention, GELU MLP), a final LayerNorm and an
// output head tied to the token embedding (GPT-2's layout).
//
// Initialisation is deterministic given the seed: every weight is drawn from
// a generator seeded from it (normal(0, 0.02); the residual projections
// scaled by 1/sqrt(2·layers) as in GPT-2; biases zero, LayerNorm weight one),
// so every rank builds the same model without a broadcast.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "runtime/model/activation_checkpoint.h"
#include "runtime/model/dropout_stream.h"
#include "runtime/model/model_interface.h"
#include "runtime/moe/moe_layer.h"
#include "runtime/tensor_parallel/tensor_parallel_group.h"

namespace dslaunch::runtime {

struct GptOptions {
  int64_t layers = 2;
  int64_t heads = 2;
  int64_t width = 64;
  int64_t sequence_length = 64;
  int64_t vocab_size = 257;
  double dropout = 0.0;
  // Activation checkpointing: recompute this many evenly spaced blocks in
  // backward instead of keeping their activations (0: none; >= layers: all).
  int64_t checkpointed_blocks = 0;
  bool checkpoint_to_cpu = false;  // keep the checkpointed inputs in host memory
  // DeepSpeed's partition_activations: the checkpointed inputs 1/T per rank
  // of the tensor group (Note [Partitioned activations]).
  bool partition_checkpoints = false;
  // On CUDA tensors: LayerNorm, bias+GELU and the loss through the fused
  // kernels (runtime/model/fused_ops.h); on the CPU the LibTorch ops always.
  bool fused_kernels = false;
  // Note [Tensor parallelism]: this rank's group; qkv and fc split by
  // column, the projections by row, the vocabulary into ranges (padded to a
  // multiple of tensor_parallel.size · vocab_divisor).
  TensorParallelGroup tensor_parallel;
  int vocab_divisor = 1;
  // The loss's label smoothing ε (PyTorch's cross_entropy(label_smoothing)).
  double label_smoothing = 0;
  // GPT-MoE (Note [Mixture of experts]): every moe.every-th block's MLP is a
  // mixture of moe.gating.num_experts GPT MLPs (none: num_experts 0).
  MoeOptions moe;
  // Note [Shard-only loading]: every parameter is built deferred (sizes, no
  // memory), one block at a time, and not initialised: a ZeRO-3 engine
  // fills this rank's pieces from a ParameterSource (SeededParameterSource
  // draws the values InitialValues would have).
  bool deferred = false;
};

// The vocabulary rows the token embedding holds on this rank.
int64_t LocalVocabRows(const GptOptions& options);

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  // Dropout draws from `dropout`, its model's stream (Note [Dropout streams]).
  CausalSelfAttentionImpl(const GptOptions& options, DropoutStream* dropout);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear qkv{nullptr};
  torch::nn::Linear projection{nullptr};

 private:
  GptOptions options_;
  DropoutStream* dropout_;
};

// The fused kernels apply to this activation (options ask for them and it
// lives on a CUDA device).
bool UsesFusedKernels(const GptOptions& options, const torch::Tensor& activation);
TORCH_MODULE(CausalSelfAttention);

class GptBlockImpl : public torch::nn::Module {
 public:
  // An expert block (options.moe.IsExpertBlock(index)) has `moe` in place of
  // fc and fc_projection; `aux_scale` is its model's (auxiliary_loss.h).
  // Dropout draws from `dropout`, its model's stream (Note [Dropout streams]).
  GptBlockImpl(const GptOptions& options, DropoutStream* dropout, int64_t index = 0,
               LossGradientScale* aux_scale = nullptr);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::LayerNorm norm1{nullptr};
  CausalSelfAttention attention{nullptr};
  torch::nn::LayerNorm norm2{nullptr};
  torch::nn::Linear fc{nullptr};
  torch::nn::Linear fc_projection{nullptr};
  MoeLayer moe{nullptr};

 private:
  GptOptions options_;
  DropoutStream* dropout_;
};
TORCH_MODULE(GptBlock);

// For ZeRO-3 each block is a layer unit; the embeddings (the token embedding
// is also the output head) and the final LayerNorm are root units.
//
// As a model family (Note [Model interface], gpt_layout.cc): layers
// "embedding" (token + position), "blocks.i", "head" (final norm + the tied
// output projection); the token embedding is tied between embedding and head;
// qkv and fc split by column, the two projections by row, the token
// embedding by vocabulary; split over options.tensor_parallel, the module
// holds this rank's slices (Note [Tensor parallelism]).
class GptImpl : public torch::nn::Module, public ModelInterface {
 public:
  GptImpl(const GptOptions& options, uint64_t seed);

  // tokens: [batch, time] int64 → logits [batch, time, vocab].
  torch::Tensor forward(const torch::Tensor& tokens);
  // Mean cross-entropy of next-token prediction.
  torch::Tensor Loss(const torch::Tensor& tokens, const torch::Tensor& targets) override;

  const GptOptions& options() const { return options_; }
  int64_t ParameterCount() const override;
  torch::Tensor ForwardLayers(int first, int last, const torch::Tensor& input, const TokenBatch& batch) override;
  std::vector<int64_t> ActivationShape(const TokenBatch& batch) const override;

  std::string family() const override { return "gpt"; }
  std::vector<ModelLayer> Layers() const override;
  std::vector<TiedParameter> TiedParameters() const override;
  std::vector<TensorParallelForm> TensorParallelForms() const override;

  std::vector<ParameterUnit> ParameterUnits() const override;
  void SetUnitRunner(UnitRunner* runner) override { runner_ = runner; }
  DropoutStream* dropout_stream() override { return &dropout_; }
  CheckpointStorage RecomputeStorage() const override;
  ParameterFill InitialValues(uint64_t seed) const override;
  LossGradientScale* auxiliary_loss_gradient() override { return moe_layers_.empty() ? nullptr : &aux_scale_; }
  torch::Tensor TakeAuxiliaryLoss() override { return std::exchange(stage_auxiliary_loss_, torch::Tensor()); }

  torch::nn::Embedding token_embedding{nullptr};
  torch::nn::Embedding position_embedding{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm final_norm{nullptr};

 private:
  void Initialize(uint64_t seed);
  bool IsCheckpointed(int64_t block) const;
  // The pieces of forward: token + position embedding; block i; final norm
  // and the tied head (logits of this rank's vocabulary range); the loss.
  torch::Tensor Embed(const torch::Tensor& tokens);
  torch::Tensor RunBlock(int64_t i, const torch::Tensor& x);
  torch::Tensor Head(const torch::Tensor& x);
  torch::Tensor LossOf(const torch::Tensor& logits, const torch::Tensor& targets);

  GptOptions options_;
  DropoutStream dropout_;          // every dropout's masks (Note [Dropout streams])
  LossGradientScale aux_scale_;  // Note [Mixture of experts]
  std::vector<MoeLayerImpl*> moe_layers_;
  torch::Tensor stage_auxiliary_loss_;  // TakeAuxiliaryLoss
  std::vector<Segment> segments_;  // one per block, for activation checkpointing
  UnitRunner* runner_ = nullptr;   // ZeRO-3: gathers each block around its use
};
TORCH_MODULE(Gpt);

}  // namespace dslaunch::runtime

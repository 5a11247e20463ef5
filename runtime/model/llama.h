// The Llama family (Llama 2/3, and Mistral- and Qwen2-style configs that
// differ from it only in the keys below) in LibTorch's C++ frontend, with
// Hugging Face's parameter names, so that a model folder's tensors load by
// name and save back under the same names (runtime/hf/).
//
//   x = embed_tokens(ids)
//   per layer:  x += o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n)))   n = input_layernorm(x)
//               x += down_proj(silu(gate_proj(n)) * up_proj(n))                      n = post_attention_layernorm(x)
//   logits = lm_head(norm(x))            (lm_head is embed_tokens when tied)
//
// RMSNorm computes its statistics in fp32 (Hugging Face: weight ·
// (x·rsqrt(mean(x²) + eps)).to(x.dtype)); rotary embeddings follow Note
// [RoPE convention]; grouped-query attention repeats each key/value head for
// heads / kv_heads query heads; attention is causal, scaled by 1/sqrt(head_dim),
// through compat::CausalAttention (SDPA on LibTorch 2.x).
//
// Initialisation without a checkpoint is deterministic given the seed
// (normal(0, initializer_range) for every matrix, RMSNorm weights one, biases
// zero, as Hugging Face's _init_weights); a checkpoint then overwrites it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "runtime/model/activation_checkpoint.h"
#include "runtime/model/key_value_cache.h"
#include "runtime/model/joined_projections.h"
#include "runtime/model/layer_residency.h"
#include "runtime/model/lora_linear.h"
#include "runtime/model/model_interface.h"
#include "runtime/model/rotary_embedding.h"
#include "runtime/moe/moe_layer.h"
#include "runtime/tensor_parallel/tensor_parallel_group.h"

namespace dslaunch::runtime {

struct LlamaOptions {
  int64_t layers = 2;           // num_hidden_layers
  int64_t hidden = 64;          // hidden_size
  int64_t intermediate = 172;   // intermediate_size
  int64_t heads = 4;            // num_attention_heads
  int64_t kv_heads = 4;         // num_key_value_heads
  int64_t head_dim = 16;        // head_dim (hidden / heads unless the config says)
  int64_t vocab_size = 256;
  double rms_norm_eps = 1e-6;
  RopeOptions rope;             // head_dim is copied from above
  bool tie_word_embeddings = false;
  bool qkv_bias = false;        // attention_bias (Llama: q, k, v and o; Qwen2: q, k, v)
  bool output_bias = false;     // o_proj's bias
  bool mlp_bias = false;
  double initializer_range = 0.02;
  // Mistral's sliding_window (0: none). Only sequences that fit in it run:
  // for them full causal attention is the same arithmetic.
  int64_t sliding_window = 0;
  // Activation checkpointing, as GptOptions.
  int64_t checkpointed_blocks = 0;
  bool checkpoint_to_cpu = false;
  bool partition_checkpoints = false;  // Note [Partitioned activations]
  // CUDA kernels for RMSNorm, SwiGLU and the loss (fused_ops.h); CUDA only.
  bool fused_kernels = false;
  // Note [Tensor parallelism]: this rank's group. q/k/v, gate and up split by
  // column (by heads), o_proj and down_proj by row, the embedding and
  // lm_head by vocabulary (padded to a multiple of tensor_parallel.size ·
  // vocab_divisor). Key/value heads fewer than the ranks are whole on every
  // rank, each rank using the one its query heads read.
  TensorParallelGroup tensor_parallel;
  int vocab_divisor = 1;
  // The loss's label smoothing ε (PyTorch's cross_entropy(label_smoothing)).
  double label_smoothing = 0;
  // Mixtral-style blocks (Note [Mixture of experts]): every moe.every-th
  // decoder layer's MLP is `block_sparse_moe`, a router over
  // moe.gating.num_experts SwiGLU experts of `intermediate` width (Hugging
  // Face's names: gate, experts.<e>.w1/w2/w3).
  MoeOptions moe;
  // Note [Shard-only loading]: every parameter is built deferred (sizes, no
  // memory), one layer at a time, and not initialised: a ZeRO-3 engine
  // fills this rank's pieces from a ParameterSource.
  bool deferred = false;
};

// The vocabulary rows the embedding (and lm_head) hold on this rank.
int64_t LocalVocabRows(const LlamaOptions& options);
// Whether k_proj and v_proj are whole on every rank: fewer key/value heads
// than tensor-parallel ranks.
bool KeyValueHeadsReplicated(const LlamaOptions& options);

// Hugging Face's LlamaRMSNorm: one `weight` of width `hidden`.
class LlamaRmsNormImpl : public torch::nn::Module {
 public:
  LlamaRmsNormImpl(int64_t hidden, double eps, bool fused = false, TensorParallelGroup group = {});
  torch::Tensor forward(const torch::Tensor& x);
  // {x + delta, forward(x + delta)}: AddRmsNormOp.
  std::pair<torch::Tensor, torch::Tensor> AddAndForward(const torch::Tensor& x, const torch::Tensor& delta);
  torch::Tensor weight;

 private:
  double eps_;
  bool fused_;
  TensorParallelGroup group_;
};
TORCH_MODULE(LlamaRmsNorm);

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  // `layer`: the decoder layer's index (what a key/value cache files it under).
  explicit LlamaAttentionImpl(const LlamaOptions& options, int64_t layer = 0);
  // x [batch, time, hidden]; cos, sin [time, head_dim] (or [batch, 1, time,
  // head_dim]) in x's dtype; `allowed` undefined (causal) or the
  // [batch, 1, time, time] mask of packed records. With `cache` (Note
  // [Key/value cache seam]) the cache attends instead, and `allowed` is unused.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& allowed = {}, KeyValueCache* cache = nullptr);

  // Note [Joined projections]: q/k/v as one product from now on, where it
  // can be (not with key/value heads replicated across tensor-parallel ranks).
  void JoinProjections();

  LoraLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  // The key/value projection's output as this rank's key/value heads
  // [batch, time, local kv heads, head_dim].
  torch::Tensor KeyValueHeads(LoraLinear projection, const torch::Tensor& x) const;

  LlamaOptions options_;
  int64_t layer_;
  int64_t heads_, kv_heads_, head_dim_;  // this rank's query and key/value heads
  bool fused_;
  JoinedProjections joined_qkv_;
};
TORCH_MODULE(LlamaAttention);

class LlamaMlpImpl : public torch::nn::Module {
 public:
  explicit LlamaMlpImpl(const LlamaOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  // Note [Joined projections]: gate and up as one product from now on.
  void JoinProjections();

  LoraLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  TensorParallelGroup group_;
  bool fused_;
  JoinedProjections joined_gate_up_;
};
TORCH_MODULE(LlamaMlp);

class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  // Layer `index` is an expert layer when options.moe.IsExpertBlock(index):
  // block_sparse_moe in place of mlp (Mixtral's layout).
  explicit LlamaDecoderLayerImpl(const LlamaOptions& options, int64_t index = 0,
                                 LossGradientScale* aux_scale = nullptr);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& allowed = {}, KeyValueCache* cache = nullptr);
  // The cached forward's layer, its residual adds joined to the RMSNorms
  // after them (AddRmsNormOp): the layer's input is x + pending (x alone when
  // pending is undefined); returns the residual after attention and the MLP's
  // output, whose sum is forward()'s result and which the next layer (or the
  // head) adds.
  std::pair<torch::Tensor, torch::Tensor> ForwardCached(const torch::Tensor& x, const torch::Tensor& pending,
                                                        const torch::Tensor& cos, const torch::Tensor& sin,
                                                        KeyValueCache& cache);

  LlamaAttention self_attn{nullptr};
  LlamaMlp mlp{nullptr};
  MoeLayer block_sparse_moe{nullptr};
  LlamaRmsNorm input_layernorm{nullptr};
  LlamaRmsNorm post_attention_layernorm{nullptr};
};
TORCH_MODULE(LlamaDecoderLayer);

// Hugging Face's LlamaModel (the "model." prefix): embeddings, layers, norm.
class LlamaBackboneImpl : public torch::nn::Module {
 public:
  // `aux_scale`: the model's (auxiliary_loss.h), for expert layers.
  explicit LlamaBackboneImpl(const LlamaOptions& options, LossGradientScale* aux_scale = nullptr);

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  LlamaRmsNorm norm{nullptr};
};
TORCH_MODULE(LlamaBackbone);

// Hugging Face's LlamaForCausalLM. As a model family (Note [Model
// interface], llama_layout.cc): layers "embedding", "layers.i", "head" (the
// final norm and lm_head); with tied embeddings model.embed_tokens.weight is
// the head too. ZeRO-3 units: the embedding (root), each decoder layer, then
// the final norm with lm_head (root); with LoRA (runtime/model/lora.h) each
// unit also names its frozen tensors, which stage 3 partitions apart (Note
// [Frozen parameters at ZeRO-3]).
// The projections are LoraLinear: plain linear maps until LoRA adapts them.
class LlamaImpl : public torch::nn::Module, public ModelInterface {
 public:
  LlamaImpl(const LlamaOptions& options, uint64_t seed);

  // tokens [batch, time] int64 → logits [batch, time, vocab] (in the
  // parameters' dtype).
  torch::Tensor forward(const torch::Tensor& tokens);
  // Packed records (TokenBatch): rotary positions from `positions`, and
  // attention only between earlier tokens of the same segment, so each
  // record computes exactly what it would alone.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& positions, const torch::Tensor& segments);
  // Mean next-token cross-entropy in fp32 over targets that are not -100
  // (Hugging Face's ignore index: prompt tokens of instruction data).
  torch::Tensor Loss(const torch::Tensor& tokens, const torch::Tensor& targets) override;
  torch::Tensor BatchLoss(const TokenBatch& batch) override;
  // Note [Key/value cache seam]: one step of cached decoding. tokens [1, n]
  // of several sequences side by side, each at its own position
  // (`positions` [n]); `cache` keeps the keys and values and attends each
  // token to its own sequence. Returns the logits of the rows `logit_rows`
  // [r] only: [r, vocab] (in the parameters' dtype). Not under autograd.
  // `positions_end`: one past the furthest position in the step, or -1 to
  // take it from `positions`, which must then be on the CPU. With it given,
  // `positions` and `logit_rows` may be on the model's device and the
  // forward waits on nothing on the host: a CUDA graph can capture it (Note
  // [Decode graphs]).
  // Note [Joined projections], for generation: every layer's q/k/v and
  // gate/up as one product each from now on. REQUIRES: the model on its
  // final device and dtype, adapters merged or absent (a projection with an
  // adapter or int8 weight stays as it is).
  // (Not with layer residency: its layers' weights are streamed one by one.)
  void JoinProjections();
  // Note [Layer residency]: from now on every forward tells `residency`
  // around each decoder layer (nullptr: the weights are all on the device).
  // Inference only: a training forward with it throws.
  void SetLayerResidency(std::shared_ptr<LayerResidency> residency) { residency_ = std::move(residency); }
  const LayerResidency* layer_residency() const { return residency_.get(); }
  torch::Tensor ForwardWithCache(const torch::Tensor& tokens, const torch::Tensor& positions, KeyValueCache& cache,
                                 const torch::Tensor& logit_rows, int64_t positions_end = -1);

  const LlamaOptions& options() const { return options_; }
  int64_t ParameterCount() const override;
  torch::Tensor ForwardLayers(int first, int last, const torch::Tensor& input, const TokenBatch& batch) override;
  std::vector<int64_t> ActivationShape(const TokenBatch& batch) const override;

  std::string family() const override { return "llama"; }
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

  LlamaBackbone model{nullptr};
  LoraLinear lm_head{nullptr};  // nullptr when tie_word_embeddings

 private:
  // What every decoder layer of one forward reads: the rotary tables and the
  // packed-record mask (undefined: causal).
  struct AttentionContext {
    torch::Tensor cos, sin, allowed;
  };
  void Initialize(uint64_t seed);
  // The rotary tables cached forwards read, for positions below `end`:
  // computed once for the whole context and kept (a position's angles do not
  // depend on the table's length), except past the context under dynamic NTK
  // scaling, where the length sets the base and each step computes its own.
  std::pair<torch::Tensor, torch::Tensor> CachedRotary(int64_t end, torch::Device device, torch::ScalarType dtype);
  bool IsCheckpointed(int64_t layer) const;
  AttentionContext Context(const torch::Tensor& tokens, const torch::Tensor& positions, const torch::Tensor& segments,
                           const torch::Tensor& activation) const;
  // Decoder layer i; a checkpointed layer keeps `context` until its backward.
  torch::Tensor RunLayer(int64_t i, const torch::Tensor& x, const AttentionContext& context);
  torch::Tensor Head(const torch::Tensor& x);
  torch::Tensor LossOf(const torch::Tensor& logits, const torch::Tensor& targets) const;

  LlamaOptions options_;
  DropoutStream dropout_;        // LoRA's dropout masks (Note [Dropout streams])
  LossGradientScale aux_scale_;  // Note [Mixture of experts]
  std::vector<MoeLayerImpl*> moe_layers_;
  torch::Tensor stage_auxiliary_loss_;  // TakeAuxiliaryLoss
  UnitRunner* runner_ = nullptr;
  std::shared_ptr<LayerResidency> residency_;
  torch::Tensor rotary_cos_, rotary_sin_;  // CachedRotary's: the whole context's
  // The unit of each decoder layer in the last ParameterUnits() (-1: none).
  mutable std::vector<int> layer_units_;
};
TORCH_MODULE(Llama);

}  // namespace dslaunch::runtime

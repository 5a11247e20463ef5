#include "runtime/model/llama.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "runtime/model/activation_checkpoint.h"
#include "runtime/model/decode_linear.h"
#include "runtime/model/deferred_parameters.h"
#include "runtime/model/fused_ops.h"
#include "runtime/model/mixtral_expert.h"
#include "runtime/model/next_token_loss.h"
#include "runtime/model/stacked_projections.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"
#include "runtime/tensor_parallel/tensor_parallel_ops.h"
#include "runtime/tensor_parallel/vocab_parallel.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

namespace {

// A projection whose base product takes the decode kernel with fused kernels (Note [Decode linear]).
LoraLinear Projection(int64_t in, int64_t out, bool bias, bool fused_kernels) {
  LoraLinear projection(in, out, bias);
  projection->fused_kernels = fused_kernels;
  return projection;
}

int Slices(const LlamaOptions& options) { return std::max(1, options.tensor_parallel.size); }

// A column-parallel projection of the whole input x (its rows of the
// output). An adapter's A is whole but reached through this rank's rows of
// B only: its gradient is summed across the group (Note [LoRA under tensor
// parallelism]).
torch::Tensor ColumnParallel(LoraLinear projection, const torch::Tensor& x, const TensorParallelGroup& group) {
  if (!group.split() || !projection->adapted()) return projection->forward(x);
  return projection->BaseForward(x) +
         projection->AdapterDelta(projection->AdapterDropout(x),
                                  ReplicatedWithPartialGradient(projection->lora_A->weight, group),
                                  projection->lora_B->weight);
}

// A row-parallel projection: the partial products summed across the group
// (or reduce-scattered along the sequence), then the bias, which is whole.
// An adapter adds its partial product (this rank's columns of A) before
// the sum; its whole B's gradient is summed across the group.
torch::Tensor RowParallel(LoraLinear projection, const torch::Tensor& x, const TensorParallelGroup& group) {
  if (!group.split()) return projection->forward(x);
  torch::Tensor partial = projection->ProductWithoutBias(x);
  if (projection->adapted()) {
    partial = partial + projection->AdapterDelta(projection->AdapterDropout(x), projection->lora_A->weight,
                                                 ReplicatedWithPartialGradient(projection->lora_B->weight, group));
  }
  torch::Tensor sum = ExitRowParallel(partial, group);
  return projection->bias.defined() ? sum + SequenceRegionParameter(projection->bias, group) : sum;
}

// Marks a row-parallel projection's input as this rank's part of the
// unsplit one (its adapter's initialisation and dropout read it).
LoraLinear RowParallelProjection(LoraLinear projection, const TensorParallelGroup& group) {
  if (group.split()) {
    projection->input_parts = group.size;
    projection->input_part = group.rank;
  }
  return projection;
}

}  // namespace

int64_t LocalVocabRows(const LlamaOptions& options) {
  return PaddedVocabSize(options.vocab_size, Slices(options), options.vocab_divisor) / Slices(options);
}

bool KeyValueHeadsReplicated(const LlamaOptions& options) { return options.kv_heads < Slices(options); }

LlamaRmsNormImpl::LlamaRmsNormImpl(int64_t hidden, double eps, bool fused, TensorParallelGroup group)
    : eps_(eps), fused_(fused), group_(group) {
  weight = register_parameter("weight", torch::ones({hidden}));
}

torch::Tensor LlamaRmsNormImpl::forward(const torch::Tensor& x) {
  return RmsNormOp(x, SequenceRegionParameter(weight, group_), eps_, fused_);
}

std::pair<torch::Tensor, torch::Tensor> LlamaRmsNormImpl::AddAndForward(const torch::Tensor& x,
                                                                        const torch::Tensor& delta) {
  return AddRmsNormOp(x, delta, SequenceRegionParameter(weight, group_), eps_, fused_);
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaOptions& options, int64_t layer)
    : options_(options),
      layer_(layer),
      heads_(options.heads / Slices(options)),
      kv_heads_(KeyValueHeadsReplicated(options) ? 1 : options.kv_heads / Slices(options)),
      head_dim_(options.head_dim),
      fused_(options.fused_kernels) {
  const int64_t kv_rows = (KeyValueHeadsReplicated(options) ? options.kv_heads : kv_heads_) * head_dim_;
  q_proj = register_module(
      "q_proj", Projection(options.hidden, heads_ * head_dim_, options.qkv_bias, options.fused_kernels));
  k_proj = register_module("k_proj", Projection(options.hidden, kv_rows, options.qkv_bias, options.fused_kernels));
  v_proj = register_module("v_proj", Projection(options.hidden, kv_rows, options.qkv_bias, options.fused_kernels));
  o_proj = register_module(
      "o_proj", RowParallelProjection(Projection(heads_ * head_dim_, options.hidden, options.output_bias,
                                                 options.fused_kernels),
                                      options.tensor_parallel));
}

torch::Tensor LlamaAttentionImpl::KeyValueHeads(LoraLinear projection, const torch::Tensor& x) const {
  const int64_t batch = x.size(0), time = x.size(1);
  const TensorParallelGroup& group = options_.tensor_parallel;
  if (!KeyValueHeadsReplicated(options_)) {
    return ColumnParallel(projection, x, group).view({batch, time, kv_heads_, head_dim_});
  }
  // Every rank holds all key/value heads and computes the one its query heads
  // read (ranks r·kv/T share head r/(T/kv)); each rank's gradient reaches
  // only that head's rows, and the sum across the group is the whole one.
  // So for an adapter: B's rows of the head, and A through them.
  const int64_t head = group.rank / (group.size / options_.kv_heads);
  torch::Tensor weight =
      ReplicatedWithPartialGradient(projection->weight, group).narrow(0, head * head_dim_, head_dim_);
  torch::Tensor bias;
  if (projection->bias.defined()) {
    bias = ReplicatedWithPartialGradient(projection->bias, group).narrow(0, head * head_dim_, head_dim_);
  }
  torch::Tensor y = torch::nn::functional::linear(x, weight, bias);
  if (projection->adapted()) {
    y = y + projection->AdapterDelta(
                projection->AdapterDropout(x), ReplicatedWithPartialGradient(projection->lora_A->weight, group),
                ReplicatedWithPartialGradient(projection->lora_B->weight, group).narrow(0, head * head_dim_, head_dim_));
  }
  return y.view({batch, time, 1, head_dim_});
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& input, const torch::Tensor& cos,
                                          const torch::Tensor& sin, const torch::Tensor& allowed,
                                          KeyValueCache* cache) {
  const TensorParallelGroup& group = options_.tensor_parallel;
  // Every time step, on every rank (under sequence parallelism, gathered).
  const int64_t batch = input.size(0), time = input.size(1) * (group.sequence_parallel ? group.size : 1);
  auto heads = [&](const torch::Tensor& t, int64_t count) {
    return t.view({batch, time, count, head_dim_}).transpose(1, 2);
  };
  torch::Tensor q, k, v;
  // Generation's joined weights, else (a replicated key/value head aside) one
  // product over the three weights (Note [Stacked projections]) that enters
  // the column-parallel region itself (Note [Overlapped input-gradient
  // reduction]). Training only: a decode step would copy the weights it
  // reads (and the decode kernel takes its weights as unchanged since the
  // step began).
  const bool joined = joined_qkv_.usable();
  if (joined || (torch::GradMode::is_enabled() && !KeyValueHeadsReplicated(options_) &&
                 Stackable({q_proj, k_proj, v_proj}))) {
    const torch::Tensor qkv = joined ? joined_qkv_.Product(EnterColumnParallel(input, group))
                                     : ColumnParallelStackedProduct({q_proj, k_proj, v_proj}, input, group);
    // The query and key heads side by side in the product: one rotary over
    // both. split (not narrow): backward joins the pieces' gradients in one pass.
    const std::vector<torch::Tensor> parts =
        qkv.split_with_sizes({(heads_ + kv_heads_) * head_dim_, kv_heads_ * head_dim_}, /*dim=*/-1);
    const std::vector<torch::Tensor> qk =
        RotaryOp(heads(parts[0], heads_ + kv_heads_), cos, sin, fused_).split_with_sizes({heads_, kv_heads_}, 1);
    q = qk[0];
    k = qk[1];
    // A copy, not a view: attention keeps its value input for backward, and
    // a view would keep the whole product alive with it, queries and keys
    // (rotated into tensors of their own) included.
    v = heads(parts[1].contiguous(), kv_heads_);
  } else {
    const torch::Tensor x = EnterColumnParallel(input, group);
    q = RotaryOp(heads(ColumnParallel(q_proj, x, group), heads_), cos, sin, fused_);
    k = RotaryOp(KeyValueHeads(k_proj, x).transpose(1, 2), cos, sin, fused_);
    v = KeyValueHeads(v_proj, x).transpose(1, 2);
  }
  if (cache != nullptr) {
    torch::Tensor y = cache->Attend(layer_, q, k, v).transpose(1, 2).contiguous().view({batch, time, heads_ * head_dim_});
    return RowParallel(o_proj, y, group);
  }
  // Grouped key/value heads go in as they are (compat: flash reads them in place).
  torch::Tensor y = allowed.defined() ? compat::MaskedAttention(q, k, v, allowed) : compat::CausalAttention(q, k, v);
  y = y.transpose(1, 2).contiguous().view({batch, time, heads_ * head_dim_});
  return RowParallel(o_proj, y, group);
}

void LlamaAttentionImpl::JoinProjections() {
  // A replicated key/value head is read as one head's rows of the whole (KeyValueHeads).
  if (!KeyValueHeadsReplicated(options_)) joined_qkv_.Join({q_proj, k_proj, v_proj});
}

LlamaMlpImpl::LlamaMlpImpl(const LlamaOptions& options)
    : group_(options.tensor_parallel), fused_(options.fused_kernels) {
  const int64_t intermediate = options.intermediate / Slices(options);
  gate_proj = register_module(
      "gate_proj", Projection(options.hidden, intermediate, options.mlp_bias, options.fused_kernels));
  up_proj = register_module(
      "up_proj", Projection(options.hidden, intermediate, options.mlp_bias, options.fused_kernels));
  down_proj = register_module(
      "down_proj", RowParallelProjection(Projection(intermediate, options.hidden, options.mlp_bias,
                                                    options.fused_kernels),
                                         options.tensor_parallel));
}

torch::Tensor LlamaMlpImpl::forward(const torch::Tensor& input) {
  if (joined_gate_up_.usable()) {
    const std::vector<torch::Tensor> gate_up = joined_gate_up_.Forward(EnterColumnParallel(input, group_));
    return RowParallel(down_proj, SwiGluOp(gate_up[0], gate_up[1], fused_), group_);
  }
  // Note [Stacked projections], training; the product enters the region
  // itself (Note [Overlapped input-gradient reduction]).
  if (torch::GradMode::is_enabled() && Stackable({gate_proj, up_proj})) {
    return RowParallel(down_proj,
                       SwiGluStackedOp(ColumnParallelStackedProduct({gate_proj, up_proj}, input, group_), fused_),
                       group_);
  }
  const torch::Tensor x = EnterColumnParallel(input, group_);
  return RowParallel(down_proj,
                     SwiGluOp(ColumnParallel(gate_proj, x, group_), ColumnParallel(up_proj, x, group_), fused_),
                     group_);
}

void LlamaMlpImpl::JoinProjections() { joined_gate_up_.Join({gate_proj, up_proj}); }

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaOptions& options, int64_t index, LossGradientScale* aux_scale) {
  // Hugging Face's order, so parameters() lists them as its state dict does.
  self_attn = register_module("self_attn", LlamaAttention(options, index));
  if (options.moe.IsExpertBlock(index)) {
    TORCH_CHECK(aux_scale != nullptr, "an expert layer needs its model's auxiliary-loss scale");
    const int64_t hidden = options.hidden, inner = options.intermediate;
    const bool fused = options.fused_kernels;
    // Mixtral's router is a projection like the others (PEFT's all-linear
    // and a target "gate" put an adapter on it), computed in fp32.
    auto router = [](int64_t in, int64_t experts) {
      LoraLinear gate(in, experts, /*bias=*/false);
      gate->keep_float = true;
      return RouterProjection{gate.ptr(),
                              [impl = gate.get()](const torch::Tensor& x) { return impl->ForwardInFloat(x); }};
    };
    block_sparse_moe = register_module(
        "block_sparse_moe", MoeLayer(
                                hidden, options.moe,
                                [hidden, inner, fused] { return std::make_shared<MixtralExpert>(hidden, inner, fused); },
                                aux_scale, router));
  } else {
    mlp = register_module("mlp", LlamaMlp(options));
  }
  input_layernorm = register_module(
      "input_layernorm",
      LlamaRmsNorm(options.hidden, options.rms_norm_eps, options.fused_kernels, options.tensor_parallel));
  post_attention_layernorm = register_module(
      "post_attention_layernorm",
      LlamaRmsNorm(options.hidden, options.rms_norm_eps, options.fused_kernels, options.tensor_parallel));
}

torch::Tensor LlamaDecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                             const torch::Tensor& allowed, KeyValueCache* cache) {
  torch::Tensor h = x + self_attn->forward(input_layernorm->forward(x), cos, sin, allowed, cache);
  torch::Tensor n = post_attention_layernorm->forward(h);
  return h + (block_sparse_moe ? block_sparse_moe->forward(n) : mlp->forward(n));
}

std::pair<torch::Tensor, torch::Tensor> LlamaDecoderLayerImpl::ForwardCached(const torch::Tensor& x,
                                                                             const torch::Tensor& pending,
                                                                             const torch::Tensor& cos,
                                                                             const torch::Tensor& sin,
                                                                             KeyValueCache& cache) {
  auto [input, normalized] =
      pending.defined() ? input_layernorm->AddAndForward(x, pending) : std::pair{x, input_layernorm->forward(x)};
  auto [h, n] = post_attention_layernorm->AddAndForward(input, self_attn->forward(normalized, cos, sin, {}, &cache));
  return {h, block_sparse_moe ? block_sparse_moe->forward(n) : mlp->forward(n)};
}

LlamaBackboneImpl::LlamaBackboneImpl(const LlamaOptions& options, LossGradientScale* aux_scale) {
  // Note [Shard-only loading]: deferred as soon as built, one layer at a time.
  auto built = [&](torch::nn::Module& module) {
    if (options.deferred) DeferParameters(module);
  };
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(LocalVocabRows(options), options.hidden));
  built(*embed_tokens);
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.layers; ++i) {
    LlamaDecoderLayer layer(options, i, aux_scale);
    built(*layer);
    layers->push_back(layer);
  }
  norm = register_module(
      "norm", LlamaRmsNorm(options.hidden, options.rms_norm_eps, options.fused_kernels, options.tensor_parallel));
  built(*norm);
}

LlamaImpl::LlamaImpl(const LlamaOptions& options, uint64_t seed) : options_(options), dropout_(seed) {
  for (int64_t i = 0; i < options.layers; ++i) layer_units_.push_back(static_cast<int>(i) + 1);
  TORCH_CHECK(options.heads > 0 && options.kv_heads > 0 && options.heads % options.kv_heads == 0,
              "num_attention_heads (", options.heads, ") must be a multiple of num_key_value_heads (",
              options.kv_heads, ")");
  TORCH_CHECK(options.head_dim > 0 && options.head_dim % 2 == 0, "head_dim (", options.head_dim,
              ") must be even for rotary embeddings");
  const int slices = Slices(options);
  TORCH_CHECK(options.heads % slices == 0, "num_attention_heads (", options.heads,
              ") must be a multiple of the tensor-parallel size (", slices, ")");
  TORCH_CHECK(options.kv_heads % slices == 0 || slices % options.kv_heads == 0, "num_key_value_heads (",
              options.kv_heads, ") and the tensor-parallel size (", slices,
              ") must divide one another: key/value heads are split, or shared by whole groups of ranks");
  TORCH_CHECK(options.intermediate % slices == 0, "intermediate_size (", options.intermediate,
              ") must be a multiple of the tensor-parallel size (", slices, ")");
  options_.rope.head_dim = options.head_dim;
  TORCH_CHECK(!options.moe.enabled() || slices == 1,
              "model.moe with tensor parallelism is not yet supported "
              "(tensor_parallel.tp_size=",
              slices, ")");
  model = register_module("model", LlamaBackbone(options_, &aux_scale_));
  moe_layers_ = FindMoeLayers(*model);
  if (!options.tie_word_embeddings) {
    lm_head = register_module(
        "lm_head", Projection(options.hidden, LocalVocabRows(options), /*bias=*/false, options.fused_kernels));
    if (options.deferred) DeferParameters(*lm_head);
  }
  // LoRA's dropout (the only dropout here) draws from the model's stream.
  for (const std::shared_ptr<torch::nn::Module>& module : modules(/*include_self=*/false)) {
    if (auto* projection = dynamic_cast<LoraLinearImpl*>(module.get())) projection->dropout_stream = &dropout_;
  }
  if (!options.deferred) Initialize(seed);
}

void LlamaImpl::Initialize(uint64_t seed) {
  InitializeSlices(*this, TensorParallelForms(), options_.tensor_parallel, InitialValues(seed));
}

ParameterFill LlamaImpl::InitialValues(uint64_t seed) const {
  // Each tensor drawn whole, so every tensor-parallel split starts from the
  // weights of the unsplit model.
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double range = options_.initializer_range;
  return [generator, range, seed](const std::string& name, torch::Tensor& values) {
    const bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    if (name.find("norm") != std::string::npos) {
      values.fill_(1.0);
    } else if (is_bias) {
      values.zero_();
    } else {
      // An expert draws from its own generator (the same at every
      // expert-parallel size).
      at::Generator own = IsExpertParameter(name) ? ExpertParameterGenerator(seed, name) : generator;
      values.normal_(0.0, range, own);
    }
  };
}

torch::Tensor LlamaImpl::forward(const torch::Tensor& tokens) { return forward(tokens, {}, {}); }

LlamaImpl::AttentionContext LlamaImpl::Context(const torch::Tensor& tokens, const torch::Tensor& positions,
                                               const torch::Tensor& segments, const torch::Tensor& activation) const {
  TORCH_CHECK(options_.sliding_window == 0 || tokens.size(1) <= options_.sliding_window, "a sequence of ",
              tokens.size(1), " tokens is longer than the model's sliding_window (", options_.sliding_window,
              "): sliding-window attention is not built");
  AttentionContext context;
  std::tie(context.cos, context.sin) =
      RotaryCosSin(options_.rope, tokens.size(1), activation.device(), activation.scalar_type());
  if (positions.defined()) {
    // Each token's own position: [batch, 1, time, head_dim], broadcast over heads.
    context.cos = context.cos.index({positions}).unsqueeze(1);
    context.sin = context.sin.index({positions}).unsqueeze(1);
  }
  if (segments.defined()) {
    // Causal within a segment; a padding position (0) sees itself only, so
    // no softmax row is empty.
    const int64_t time = tokens.size(1);
    const auto bool_options = torch::TensorOptions().dtype(torch::kBool).device(tokens.device());
    torch::Tensor same = segments.unsqueeze(2).eq(segments.unsqueeze(1)).logical_and(segments.ne(0).unsqueeze(1));
    torch::Tensor causal = torch::ones({time, time}, bool_options).tril();
    context.allowed = same.logical_and(causal).logical_or(torch::eye(time, bool_options)).unsqueeze(1);
  }
  return context;
}

torch::Tensor LlamaImpl::RunLayer(int64_t i, const torch::Tensor& x, const AttentionContext& context) {
  LlamaDecoderLayerImpl* layer = model->layers[i]->as<LlamaDecoderLayer>();
  // By value: activation checkpointing recomputes the layer in backward,
  // after later forwards (other micro-batches in a pipeline) made their own.
  Segment block = [layer, context](const torch::Tensor& in) {
    return layer->forward(in, context.cos, context.sin, context.allowed);
  };
  const bool recompute = is_training() && IsCheckpointed(i);
  Segment run = [&, recompute](const torch::Tensor& in) {
    return recompute ? CheckpointedForward(block, in, RecomputeStorage(), &dropout_) : block(in);
  };
  // ParameterUnits(): the unit of layer i, or -1 when it holds no parameter.
  const int unit = runner_ != nullptr ? layer_units_.at(i) : -1;
  if (residency_) {
    // Note [Layer residency].
    TORCH_CHECK(!is_training(), "a Llama whose layers are streamed (ZeRO-Inference) does not train");
    residency_->BeforeLayer(i);
    torch::Tensor y = run(x);
    residency_->AfterLayer(i);
    return y;
  }
  return unit >= 0 ? runner_->Run(unit, run, x) : run(x);
}

torch::Tensor LlamaImpl::Head(const torch::Tensor& x) {
  // Each rank's logits are its vocabulary range, for every time step.
  const TensorParallelGroup& group = options_.tensor_parallel;
  const torch::Tensor normalized = model->norm->forward(x);
  // Split: the product enters the column-parallel region itself (Note
  // [Overlapped input-gradient reduction]) unless an adapter or int8 head
  // reads it too.
  if (options_.tie_word_embeddings) {
    if (group.split()) {
      return ColumnParallelProduct(normalized, {model->embed_tokens->weight}, {}, group, options_.fused_kernels);
    }
    return LinearOp(normalized, model->embed_tokens->weight, {}, options_.fused_kernels);
  }
  if (group.split() && Stackable({lm_head})) return ColumnParallelStackedProduct({lm_head}, normalized, group);
  return lm_head->forward(EnterColumnParallel(normalized, group));
}

torch::Tensor LlamaImpl::LossOf(const torch::Tensor& logits, const torch::Tensor& targets) const {
  // Targets of -100 (an instruction prompt, padding) carry no loss.
  return NextTokenLoss(logits.view({-1, logits.size(-1)}), targets.reshape({-1}), options_.vocab_size,
                       options_.label_smoothing, options_.tensor_parallel, options_.fused_kernels);
}

torch::Tensor LlamaImpl::forward(const torch::Tensor& tokens, const torch::Tensor& positions,
                                 const torch::Tensor& segments) {
  if (runner_ != nullptr) runner_->BeginForward();
  // Under sequence parallelism this rank's time steps only.
  torch::Tensor x = VocabParallelEmbedding(tokens, model->embed_tokens->weight, options_.tensor_parallel);
  const AttentionContext context = Context(tokens, positions, segments, x);
  for (int64_t i = 0; i < options_.layers; ++i) x = RunLayer(i, x, context);
  return Head(x);
}

void LlamaImpl::JoinProjections() {
  // Streamed layers' weights are views of the keeper's device slots: a
  // joined copy would put every layer's q/k/v on the device again.
  if (residency_) return;
  for (const auto& layer : *model->layers) {
    auto* decoder = layer->as<LlamaDecoderLayer>();
    decoder->self_attn->JoinProjections();
    if (decoder->mlp) decoder->mlp->JoinProjections();  // an expert layer has none
  }
}

std::pair<torch::Tensor, torch::Tensor> LlamaImpl::CachedRotary(int64_t end, torch::Device device,
                                                                torch::ScalarType dtype) {
  const RopeOptions& rope = options_.rope;
  if (rope.scaling.type == RopeScaling::Type::kDynamic && end > rope.max_position_embeddings) {
    // Hugging Face's dynamic NTK scaling: the base follows the furthest position.
    return RotaryCosSin(rope, end, device, dtype);
  }
  const int64_t length = std::max(end, rope.max_position_embeddings);
  if (!rotary_cos_.defined() || rotary_cos_.size(0) < length || rotary_cos_.device() != device ||
      rotary_cos_.scalar_type() != dtype) {
    std::tie(rotary_cos_, rotary_sin_) = RotaryCosSin(rope, length, device, dtype);
  }
  return {rotary_cos_, rotary_sin_};
}

torch::Tensor LlamaImpl::ForwardWithCache(const torch::Tensor& tokens, const torch::Tensor& positions,
                                          KeyValueCache& cache, const torch::Tensor& logit_rows,
                                          int64_t positions_end) {
  TORCH_CHECK(tokens.dim() == 2 && tokens.size(0) == 1, "a cached forward takes tokens [1, n]");
  TORCH_CHECK(positions.dim() == 1 && positions.size(0) == tokens.size(1), "a cached forward takes positions [n]");
  TORCH_CHECK(!options_.tensor_parallel.split() || !options_.tensor_parallel.sequence_parallel,
              "a cached forward with sequence parallelism is not built");
  TORCH_CHECK(positions_end >= 0 || positions.device().is_cpu(),
              "a cached forward without positions_end takes its positions on the CPU");
  torch::NoGradGuard no_grad;
  torch::Tensor x = VocabParallelEmbedding(tokens, model->embed_tokens->weight, options_.tensor_parallel);
  // Tables up to the step's furthest position: what Hugging Face's dynamic
  // NTK scaling computes from during cached generation, too.
  const int64_t end = positions_end >= 0 ? positions_end : positions.max().item<int64_t>() + 1;
  auto [cos, sin] = CachedRotary(end, x.device(), x.scalar_type());
  const torch::Tensor at = positions.to(cos.device());
  cos = cos.index({at}).unsqueeze(0).unsqueeze(0);  // [1, 1, n, head_dim]
  sin = sin.index({at}).unsqueeze(0).unsqueeze(0);
  torch::Tensor pending;  // the last layer's output, not yet added to x
  for (int64_t i = 0; i < options_.layers; ++i) {
    if (residency_) residency_->BeforeLayer(i);  // Note [Layer residency]
    std::tie(x, pending) = model->layers[i]->as<LlamaDecoderLayer>()->ForwardCached(x, pending, cos, sin, cache);
    if (residency_) residency_->AfterLayer(i);
  }
  if (pending.defined()) x = x + pending;
  return Head(x.index_select(1, logit_rows.to(x.device()))).squeeze(0);
}

torch::Tensor LlamaImpl::Loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  return BatchLoss(TokenBatch{tokens, targets});
}

torch::Tensor LlamaImpl::BatchLoss(const TokenBatch& batch) {
  return AddAuxiliaryLosses(LossOf(forward(batch.tokens, batch.positions, batch.segments), batch.targets), moe_layers_,
                            &aux_scale_);
}

torch::Tensor LlamaImpl::ForwardLayers(int first, int last, const torch::Tensor& input, const TokenBatch& batch) {
  // Layers: 0 the embedding, 1 .. L the decoder layers, L + 1 the head.
  const int head = static_cast<int>(options_.layers) + 1;
  TORCH_CHECK(0 <= first && first <= last && last <= head, "Llama layers [", first, ", ", last, "] of 0 .. ", head);
  torch::Tensor x = input;
  if (first == 0) {
    if (runner_ != nullptr) runner_->BeginForward();
    x = VocabParallelEmbedding(batch.tokens, model->embed_tokens->weight, options_.tensor_parallel);
  }
  const int end = std::min(last, head - 1);
  if (std::max(first, 1) <= end) {
    const AttentionContext context = Context(batch.tokens, batch.positions, batch.segments, x);
    for (int layer = std::max(first, 1); layer <= end; ++layer) {
      x = RunLayer(layer - 1, x, context);
      // Note [Experts in pipeline stages]: the layer's auxiliary loss, for the step's loss.
      const MoeLayer& moe = model->layers[layer - 1]->as<LlamaDecoderLayer>()->block_sparse_moe;
      if (!moe.is_empty()) TallyAuxiliaryLoss(*moe, &stage_auxiliary_loss_);
    }
  }
  return last == head ? LossOf(Head(x), batch.targets) : x;
}

CheckpointStorage LlamaImpl::RecomputeStorage() const {
  return ModelCheckpointStorage(options_.checkpoint_to_cpu, options_.partition_checkpoints, options_.tensor_parallel);
}

bool LlamaImpl::IsCheckpointed(int64_t layer) const {
  return IsCheckpointedLayer(layer, options_.checkpointed_blocks, options_.layers);
}

std::vector<ParameterUnit> LlamaImpl::ParameterUnits() const {
  // With LoRA the embedding and head hold frozen tensors only: units all the
  // same, which stage 3 partitions (Note [Frozen parameters at ZeRO-3]).
  ParameterUnitList units;
  layer_units_.clear();
  units.Add({model->embed_tokens.get()}, /*layer=*/false);
  for (const auto& layer : *model->layers) layer_units_.push_back(units.Add({layer.get()}, /*layer=*/true));
  units.Add({model->norm.get(), lm_head ? lm_head.get() : nullptr}, /*layer=*/false);
  return units.Take();
}

int64_t LlamaImpl::ParameterCount() const { return CountParameters(*this); }

}  // namespace dslaunch::runtime

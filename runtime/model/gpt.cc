#include "runtime/model/gpt.h"

#include <cmath>
#include <vector>

#include "runtime/model/deferred_parameters.h"
#include "runtime/model/fused_ops.h"
#include "runtime/model/next_token_loss.h"
#include "runtime/model/stacked_projections.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"
#include "runtime/tensor_parallel/tensor_parallel_ops.h"
#include "runtime/tensor_parallel/vocab_parallel.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

namespace {
// x·Wᵀ + b as one addmm over the rows. With LibTorch's linear() on the 3-D
// activations, the GPU profile (scripts/gpu-step-profile.sh, LibTorch 2.11,
// bf16) showed every bias add as a separate broadcast kernel, ~6% of a ~124M
// step; on 2-D input addmm gives the bias to cuBLASLt's epilogue.
torch::Tensor Affine(const torch::nn::Linear& layer, const torch::Tensor& x) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = layer->weight.size(0);
  return torch::addmm(layer->bias, x.reshape({-1, x.size(-1)}), layer->weight.t()).view(shape);
}
}  // namespace

namespace {
// A row-parallel layer: the partial products summed across the tensor group
// (or reduce-scattered along the sequence), then the bias, which is whole.
torch::Tensor RowParallelAffine(const torch::nn::Linear& layer, const torch::Tensor& x,
                                const TensorParallelGroup& group) {
  if (!group.split()) return Affine(layer, x);
  torch::Tensor sum = ExitRowParallel(torch::nn::functional::linear(x, layer->weight), group);
  return sum + SequenceRegionParameter(layer->bias, group);
}
}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptOptions& options, DropoutStream* dropout)
    : options_(options), dropout_(dropout) {
  TORCH_CHECK(dropout_ != nullptr, "attention needs its model's dropout stream");
  const int64_t slices = std::max(1, options.tensor_parallel.size);
  qkv = register_module("qkv", torch::nn::Linear(options.width, 3 * options.width / slices));
  projection = register_module("projection", torch::nn::Linear(options.width / slices, options.width));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const TensorParallelGroup& group = options_.tensor_parallel;
  // Every time step, on every rank (under sequence parallelism, gathered).
  const torch::Tensor product = ColumnParallelProduct(x, {qkv->weight}, {qkv->bias}, group, /*fused_kernels=*/false);
  const int64_t batch = product.size(0), time = product.size(1);
  const int64_t width = qkv->weight.size(0) / 3;  // this rank's heads
  const int64_t heads = options_.heads / std::max(1, group.size);
  auto parts = product.split(width, /*dim=*/2);
  auto split_heads = [&](const torch::Tensor& t) {
    return t.view({batch, time, heads, width / heads}).transpose(1, 2);
  };
  torch::Tensor y = compat::CausalAttention(split_heads(parts[0]), split_heads(parts[1]), split_heads(parts[2]));
  y = y.transpose(1, 2).contiguous().view({batch, time, width});
  return dropout_->ApplyInRegion(RowParallelAffine(projection, y, group), options_.dropout, is_training(), group);
}

bool UsesFusedKernels(const GptOptions& options, const torch::Tensor& activation) {
  return options.fused_kernels && activation.is_cuda();
}

namespace {
// Under sequence parallelism a norm sees this rank's time steps only: its
// weight and bias gradients are summed across the tensor group.
torch::Tensor Normalize(const torch::nn::LayerNorm& norm, const torch::Tensor& x, bool fused,
                        const TensorParallelGroup& group) {
  return LayerNormOp(x, SequenceRegionParameter(norm->weight, group), SequenceRegionParameter(norm->bias, group),
                     norm->options.eps(), fused);
}
}  // namespace

int64_t LocalVocabRows(const GptOptions& options) {
  const int slices = std::max(1, options.tensor_parallel.size);
  return PaddedVocabSize(options.vocab_size, slices, options.vocab_divisor) / slices;
}

GptBlockImpl::GptBlockImpl(const GptOptions& options, DropoutStream* dropout, int64_t index,
                           LossGradientScale* aux_scale)
    : options_(options), dropout_(dropout) {
  norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options.width})));
  attention = register_module("attention", CausalSelfAttention(options, dropout));
  norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options.width})));
  if (options.moe.IsExpertBlock(index)) {
    TORCH_CHECK(aux_scale != nullptr, "an expert block needs its model's auxiliary-loss scale");
    const int64_t width = options.width;
    moe = register_module(
        "moe", MoeLayer(
                   width, options.moe, [width] { return std::make_shared<GeluExpert>(width, 4 * width); }, aux_scale));
    return;
  }
  const int64_t slices = std::max(1, options.tensor_parallel.size);
  fc = register_module("fc", torch::nn::Linear(options.width, 4 * options.width / slices));
  fc_projection = register_module("fc_projection", torch::nn::Linear(4 * options.width / slices, options.width));
}

torch::Tensor GptBlockImpl::forward(const torch::Tensor& x) {
  const bool fused = UsesFusedKernels(options_, x);
  const TensorParallelGroup& group = options_.tensor_parallel;
  torch::Tensor h = x + attention->forward(Normalize(norm1, x, fused, group));
  if (moe) return h + dropout_->Apply(moe->forward(Normalize(norm2, h, fused, group)), options_.dropout, is_training());
  torch::Tensor n = Normalize(norm2, h, fused, group);
  // Fused: the bias joins the GELU instead of the matrix product.
  torch::Tensor a =
      fused ? BiasGeluOp(ColumnParallelProduct(n, {fc->weight}, {}, group, /*fused_kernels=*/false), fc->bias,
                         /*fused=*/true)
            : torch::gelu(ColumnParallelProduct(n, {fc->weight}, {fc->bias}, group, /*fused_kernels=*/false), "tanh");
  torch::Tensor m = RowParallelAffine(fc_projection, a, group);
  return h + dropout_->ApplyInRegion(m, options_.dropout, is_training(), group);
}

GptImpl::GptImpl(const GptOptions& options, uint64_t seed) : options_(options), dropout_(seed) {
  const TensorParallelGroup& group = options.tensor_parallel;
  const int slices = std::max(1, group.size);
  TORCH_CHECK(options.heads % slices == 0 && options.width % options.heads == 0, "model.heads (", options.heads,
              ") must be a multiple of the tensor-parallel size (", slices, ")");
  token_embedding =
      register_module("token_embedding", torch::nn::Embedding(LocalVocabRows(options), options.width));
  position_embedding = register_module(
      "position_embedding", torch::nn::Embedding(options.sequence_length, options.width));
  blocks = register_module("blocks", torch::nn::ModuleList());
  TORCH_CHECK(!options.moe.enabled() || !group.split(),
              "model.moe with tensor parallelism is not yet supported "
              "(tensor_parallel.tp_size=",
              group.size, ")");
  // Note [Shard-only loading]: deferred as soon as built, one block at a time.
  if (options.deferred) {
    DeferParameters(*token_embedding);
    DeferParameters(*position_embedding);
  }
  for (int64_t i = 0; i < options.layers; ++i) {
    GptBlock block(options, &dropout_, i, &aux_scale_);
    if (options.deferred) DeferParameters(*block);
    blocks->push_back(block);
  }
  moe_layers_ = FindMoeLayers(*blocks);
  for (int64_t i = 0; i < options.layers; ++i) {
    GptBlockImpl* block = (*blocks)[i]->as<GptBlock>();
    segments_.push_back([block](const torch::Tensor& x) { return block->forward(x); });
  }
  final_norm =
      register_module("final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options.width})));
  if (options.deferred) {
    DeferParameters(*final_norm);
  } else {
    Initialize(seed);
  }
}

void GptImpl::Initialize(uint64_t seed) {
  InitializeSlices(*this, TensorParallelForms(), options_.tensor_parallel, InitialValues(seed));
}

ParameterFill GptImpl::InitialValues(uint64_t seed) const {
  // A private generator: the model's weights do not depend on what else has
  // drawn random numbers before. Each tensor is drawn whole, so every
  // tensor-parallel split starts from the weights of the unsplit model.
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(options_.layers));
  return [generator, residual_std, seed](const std::string& name, torch::Tensor& values) {
    if (name.find("norm") != std::string::npos) {
      values.fill_(name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0 ? 1.0 : 0.0);
    } else if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      values.zero_();
    } else {
      bool residual = name.find("projection.weight") != std::string::npos;
      // An expert draws from its own generator (the same at every
      // expert-parallel size).
      at::Generator own = IsExpertParameter(name) ? ExpertParameterGenerator(seed, name) : generator;
      values.normal_(0.0, residual ? residual_std : 0.02, own);
    }
  };
}

torch::Tensor GptImpl::Embed(const torch::Tensor& tokens) {
  const TensorParallelGroup& group = options_.tensor_parallel;
  const int64_t time = tokens.size(1);
  torch::Tensor positions = torch::arange(time, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  // Under sequence parallelism this rank holds time steps [r·T/n, (r+1)·T/n).
  torch::Tensor x = VocabParallelEmbedding(tokens, token_embedding->weight, group);
  if (group.split() && group.sequence_parallel) positions = positions.narrow(0, group.rank * x.size(1), x.size(1));
  x = x + torch::embedding(SequenceRegionParameter(position_embedding->weight, group), positions);
  return dropout_.ApplyInRegion(x, options_.dropout, is_training(), group);
}

torch::Tensor GptImpl::RunBlock(int64_t i, const torch::Tensor& x) {
  const bool recompute = is_training() && IsCheckpointed(i);
  const Segment& block = segments_[i];
  Segment run = [&, recompute](const torch::Tensor& in) {
    return recompute ? CheckpointedForward(block, in, RecomputeStorage(), &dropout_) : block(in);
  };
  // Unit 0 is the embeddings; block i is unit i + 1.
  return runner_ != nullptr ? runner_->Run(static_cast<int>(i + 1), run, x) : run(x);
}

torch::Tensor GptImpl::Head(const torch::Tensor& x) {
  const TensorParallelGroup& group = options_.tensor_parallel;
  torch::Tensor normalized = Normalize(final_norm, x, UsesFusedKernels(options_, x), group);
  // Tied head: the token embedding doubles as the output projection; each
  // rank computes the logits of its vocabulary range for every time step.
  return ColumnParallelProduct(normalized, {token_embedding->weight}, {}, group, /*fused_kernels=*/false);
}

torch::Tensor GptImpl::LossOf(const torch::Tensor& logits, const torch::Tensor& targets) {
  return NextTokenLoss(logits.view({-1, logits.size(-1)}), targets.reshape({-1}), options_.vocab_size,
                       options_.label_smoothing, options_.tensor_parallel, UsesFusedKernels(options_, logits));
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens) {
  if (runner_ != nullptr) runner_->BeginForward();
  torch::Tensor x = Embed(tokens);
  for (int64_t i = 0; i < options_.layers; ++i) x = RunBlock(i, x);
  return Head(x);
}

torch::Tensor GptImpl::Loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  return AddAuxiliaryLosses(LossOf(forward(tokens), targets), moe_layers_, &aux_scale_);
}

torch::Tensor GptImpl::ForwardLayers(int first, int last, const torch::Tensor& input, const TokenBatch& batch) {
  // Layers: 0 the embeddings, 1 .. L the blocks, L + 1 the head.
  const int head = static_cast<int>(options_.layers) + 1;
  TORCH_CHECK(0 <= first && first <= last && last <= head, "GPT layers [", first, ", ", last, "] of 0 .. ", head);
  TORCH_CHECK(!batch.positions.defined() && !batch.segments.defined(),
              "model family gpt cannot train on packed records (set "
              "data.packing: false)");
  torch::Tensor x = input;
  if (first == 0) {
    if (runner_ != nullptr) runner_->BeginForward();
    x = Embed(batch.tokens);
  }
  for (int layer = std::max(first, 1); layer <= std::min(last, head - 1); ++layer) {
    x = RunBlock(layer - 1, x);
    // Note [Experts in pipeline stages]: the block's auxiliary loss, for the step's loss.
    const MoeLayer& moe = (*blocks)[layer - 1]->as<GptBlock>()->moe;
    if (!moe.is_empty()) TallyAuxiliaryLoss(*moe, &stage_auxiliary_loss_);
  }
  return last == head ? LossOf(Head(x), batch.targets) : x;
}

CheckpointStorage GptImpl::RecomputeStorage() const {
  return ModelCheckpointStorage(options_.checkpoint_to_cpu, options_.partition_checkpoints, options_.tensor_parallel);
}

bool GptImpl::IsCheckpointed(int64_t block) const {
  return IsCheckpointedLayer(block, options_.checkpointed_blocks, options_.layers);
}

std::vector<ParameterUnit> GptImpl::ParameterUnits() const {
  // Every unit holds parameters, so block i is unit i + 1 (RunBlock).
  ParameterUnitList units;
  units.Add({token_embedding.get(), position_embedding.get()}, /*layer=*/false);
  for (const auto& block : *blocks) units.Add({block.get()}, /*layer=*/true);
  units.Add({final_norm.get()}, /*layer=*/false);
  return units.Take();
}

int64_t GptImpl::ParameterCount() const { return CountParameters(*this); }

}  // namespace dslaunch::runtime

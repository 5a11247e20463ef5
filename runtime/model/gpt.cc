#include "runtime/model/gpt.h"

#include <cmath>
#include <vector>

#include "runtime/model/fused_ops.h"
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

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptOptions& options)
    : heads_(options.heads), dropout_(options.dropout) {
  qkv = register_module("qkv", torch::nn::Linear(options.width, 3 * options.width));
  projection = register_module("projection", torch::nn::Linear(options.width, options.width));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t batch = x.size(0), time = x.size(1), width = x.size(2);
  auto parts = Affine(qkv, x).split(width, /*dim=*/2);
  auto heads = [&](const torch::Tensor& t) {
    return t.view({batch, time, heads_, width / heads_}).transpose(1, 2);
  };
  torch::Tensor y = compat::CausalAttention(heads(parts[0]), heads(parts[1]), heads(parts[2]));
  y = y.transpose(1, 2).contiguous().view({batch, time, width});
  return torch::dropout(Affine(projection, y), dropout_, is_training());
}

bool UsesFusedKernels(const GptOptions& options, const torch::Tensor& activation) {
  return options.fused_kernels && activation.is_cuda();
}

namespace {
torch::Tensor Normalize(const torch::nn::LayerNorm& norm, const torch::Tensor& x, bool fused) {
  return LayerNormOp(x, norm->weight, norm->bias, norm->options.eps(), fused);
}
}  // namespace

GptBlockImpl::GptBlockImpl(const GptOptions& options) : options_(options) {
  norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options.width})));
  attention = register_module("attention", CausalSelfAttention(options));
  norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options.width})));
  fc = register_module("fc", torch::nn::Linear(options.width, 4 * options.width));
  fc_projection = register_module("fc_projection", torch::nn::Linear(4 * options.width, options.width));
}

torch::Tensor GptBlockImpl::forward(const torch::Tensor& x) {
  const bool fused = UsesFusedKernels(options_, x);
  torch::Tensor h = x + attention->forward(Normalize(norm1, x, fused));
  torch::Tensor n = Normalize(norm2, h, fused);
  // Fused: the bias joins the GELU instead of the matrix product.
  torch::Tensor a = fused ? BiasGeluOp(torch::nn::functional::linear(n, fc->weight), fc->bias, /*fused=*/true)
                          : torch::gelu(Affine(fc, n), "tanh");
  torch::Tensor m = Affine(fc_projection, a);
  return h + torch::dropout(m, options_.dropout, is_training());
}

GptImpl::GptImpl(const GptOptions& options, uint64_t seed) : options_(options) {
  token_embedding =
      register_module("token_embedding", torch::nn::Embedding(options.vocab_size, options.width));
  position_embedding = register_module(
      "position_embedding", torch::nn::Embedding(options.sequence_length, options.width));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.layers; ++i) blocks->push_back(GptBlock(options));
  for (int64_t i = 0; i < options.layers; ++i) {
    GptBlockImpl* block = (*blocks)[i]->as<GptBlock>();
    segments_.push_back([block](const torch::Tensor& x) { return block->forward(x); });
  }
  final_norm =
      register_module("final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options.width})));
  Initialize(seed);
}

void GptImpl::Initialize(uint64_t seed) {
  torch::NoGradGuard no_grad;
  // A private generator: the model's weights do not depend on what else has
  // drawn random numbers before.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(options_.layers));
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    torch::Tensor values = torch::empty(p.sizes(), torch::kFloat);
    if (name.find("norm") != std::string::npos) {
      values.fill_(name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0 ? 1.0 : 0.0);
    } else if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      values.zero_();
    } else {
      bool residual = name.find("projection.weight") != std::string::npos;
      values.normal_(0.0, residual ? residual_std : 0.02, generator);
    }
    p.copy_(values);
  }
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens) {
  if (runner_ != nullptr) runner_->BeginForward();
  const int64_t time = tokens.size(1);
  torch::Tensor positions = torch::arange(time, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  torch::Tensor x = token_embedding->forward(tokens) + position_embedding->forward(positions);
  x = torch::dropout(x, options_.dropout, is_training());
  for (int64_t i = 0; i < options_.layers; ++i) {
    const bool recompute = is_training() && IsCheckpointed(i);
    const Segment& block = segments_[i];
    Segment run = [&, recompute](const torch::Tensor& in) {
      return recompute ? CheckpointedForward(block, in, options_.checkpoint_to_cpu) : block(in);
    };
    // Unit 0 is the embeddings; block i is unit i + 1.
    x = runner_ != nullptr ? runner_->Run(static_cast<int>(i + 1), run, x) : run(x);
  }
  x = Normalize(final_norm, x, UsesFusedKernels(options_, x));
  // Tied head: the token embedding doubles as the output projection.
  return torch::nn::functional::linear(x, token_embedding->weight);
}

torch::Tensor GptImpl::Loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  torch::Tensor logits = forward(tokens);
  return CrossEntropyOp(logits.view({-1, logits.size(-1)}), targets.reshape({-1}),
                        UsesFusedKernels(options_, logits));
}

bool GptImpl::IsCheckpointed(int64_t block) const {
  return IsCheckpointedLayer(block, options_.checkpointed_blocks, options_.layers);
}

std::vector<ParameterUnit> GptImpl::ParameterUnits() const {
  std::vector<ParameterUnit> units;
  int64_t next = 0;
  auto add = [&](int64_t count, bool layer) {
    units.push_back(ParameterUnit{next, count, layer});
    next += count;
  };
  add(static_cast<int64_t>(token_embedding->parameters().size() + position_embedding->parameters().size()),
      /*layer=*/false);
  for (const auto& block : *blocks) add(static_cast<int64_t>(block->parameters().size()), /*layer=*/true);
  add(static_cast<int64_t>(final_norm->parameters().size()), /*layer=*/false);
  return units;
}

int64_t GptImpl::ParameterCount() const { return CountParameters(*this); }

}  // namespace dslaunch::runtime

// A linear projection that can carry a LoRA adapter (Note [LoRA]).
//
// Note [LoRA]
// Hu et al.'s low-rank adaptation, as Hugging Face PEFT computes it:
//   y = x·Wᵀ + b + scale · (dropout(x)·Aᵀ)·Bᵀ
// with A [r, in] and B [out, r], scale = lora_alpha / r (rsLoRA:
// lora_alpha / sqrt(r)). A starts as PEFT's kaiming_uniform(a = sqrt(5))
// (uniform in ±1/sqrt(in)), B at zero, so an adapted model starts exactly
// where its base is. The base W (and b) is frozen: requires_grad false, so
// the engine gives it no gradient, no fp32 master and no optimizer state.
// Parameter names are PEFT's without its "base_model.model." prefix:
// "model.layers.0.self_attn.q_proj.lora_A.weight" beside the base's
// "model.layers.0.self_attn.q_proj.weight", so the base still loads and
// exports under Hugging Face's names.
// Merging (for a full export): W' = W + scale · B·A, computed in fp32.
//
// Note [Int8 weights]: for generation, a projection's weight can be kept as
// int8 with one scale per output row (symmetric, absmax / 127, as gpt-fast's
// weight-only int8): y = (x·Qᵀ) · scale + b, Q converted to x's dtype inside
// the product. The float weight's storage is released (the parameter stays
// registered, empty); the int8 values and scales are buffers. Generation
// only: no gradient or merge path reads it, and an adapter is merged into
// the weight before it is quantized (MergeAdapter). Split over a tensor
// group, a row-parallel projection's rank holds part of each row: its
// scale is the whole row's absmax, the ranks' maxima reduced
// (QuantizeWeightsInt8), so every rank's int8 values are its slice of the
// unsplit model's and the partial products, each scaled, sum to its product.
#pragma once

#include <cstdint>
#include <optional>

#include <torch/torch.h>

#include "runtime/model/dropout_stream.h"

namespace dslaunch::runtime {

struct LoraAdapterOptions {
  int64_t r = 8;
  double alpha = 8;
  double dropout = 0;
  bool use_rslora = false;
  // lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA.
  double scale() const;
};

// Registers `weight` [out, in] and, with `bias`, `bias` [out], as
// torch::nn::Linear does; lora_A and lora_B exist once EnableAdapter ran.
class LoraLinearImpl : public torch::nn::Module {
 public:
  LoraLinearImpl(int64_t in, int64_t out, bool bias);

  // With an adapter, its product accumulates into the base product in place
  // (one matrix product with beta 1 and alpha = scale; Note [Stacked
  // projections]) instead of being scaled and added in passes of their own.
  torch::Tensor forward(const torch::Tensor& x);

  // Adds the adapter (in the base weight's dtype and device), initialised
  // from `generator`, and freezes the base weight and bias. With
  // input_parts > 1, A is drawn as the unsplit projection's and this part's
  // columns kept.
  void EnableAdapter(const LoraAdapterOptions& options, at::Generator generator);
  bool adapted() const { return adapter_.has_value(); }
  // REQUIRES: adapted().
  const LoraAdapterOptions& adapter_options() const { return adapter_.value(); }

  // forward in fp32 whatever the parameters' dtype (the product and the
  // adapter's), for a router (Note [Mixture of experts]: routing decisions
  // in fp32). No bias, no int8.
  torch::Tensor ForwardInFloat(const torch::Tensor& x);

  // The pieces of forward, for a model that splits the projection over a
  // tensor group (Note [LoRA under tensor parallelism] in lora.h):
  // x·Wᵀ + b (int8: x·Qᵀ·scale + b);
  torch::Tensor BaseForward(const torch::Tensor& x) const;
  // the adapter's dropout of x (with input_parts > 1: this part of the
  // unsplit input's mask); REQUIRES: adapted();
  torch::Tensor AdapterDropout(const torch::Tensor& x);
  // scale · (dropped·aᵀ)·bᵀ, `a` and `b` standing for lora_A's and lora_B's
  // weights (views of them that reduce their gradients across the group).
  torch::Tensor AdapterDelta(const torch::Tensor& dropped, const torch::Tensor& a, const torch::Tensor& b) const;

  // Set by a model whose row-parallel projection this is: its input is part
  // `input_part` of `input_parts` equal parts of the unsplit one's.
  int64_t input_parts = 1;
  int64_t input_part = 0;
  // W + scale · B·A in the base weight's dtype (W itself without an adapter).
  torch::Tensor MergedWeight() const;
  // Folds the adapter into the base weight for good (W = MergedWeight()) and
  // removes lora_A and lora_B: the projection then computes what it computed
  // with the adapter up to W's one rounding. For generation (int8 weights).
  void MergeAdapter();

  // Note [Int8 weights]. REQUIRES: no adapter; the weight on its final device
  // and dtype (a later Module::to would convert the int8 values too).
  // `row_absmax` ([out], fp32): each row's largest |value| when the rows are
  // longer than this weight's (a row-parallel slice); undefined: this
  // weight's own (RowAbsMax()).
  void QuantizeInt8(const torch::Tensor& row_absmax = {});
  // Each output row's largest |value| of the float weight, fp32 [out].
  torch::Tensor RowAbsMax() const;
  bool int8() const { return weight_int8.defined(); }
  // x·Wᵀ (int8: x·Qᵀ·scale) without the bias and the adapter: a row-parallel
  // rank's partial product.
  torch::Tensor ProductWithoutBias(const torch::Tensor& x) const;
  torch::Tensor weight_int8, weight_scale;  // [out, in] int8, [out] in the weight's former dtype

  torch::Tensor weight, bias;  // bias undefined without one
  // Where the adapter's dropout masks come from (Note [Dropout streams]);
  // null: LibTorch's dropout on the process's random state.
  DropoutStream* dropout_stream = nullptr;
  // The base product through LinearOp's kernels (Note [Decode linear]).
  bool fused_kernels = false;
  // Left in its dtype by int8 quantization (a router: its choices would
  // move with the rounding).
  bool keep_float = false;
  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};

 private:
  int64_t in_, out_;
  std::optional<LoraAdapterOptions> adapter_;
};
TORCH_MODULE(LoraLinear);

}  // namespace dslaunch::runtime

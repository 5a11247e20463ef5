#include "runtime/model/lora_linear.h"

#include <cmath>

#include "runtime/model/decode_linear.h"

namespace dslaunch::runtime {

double LoraAdapterOptions::scale() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

LoraLinearImpl::LoraLinearImpl(int64_t in, int64_t out, bool with_bias) : in_(in), out_(out) {
  // torch::nn::Linear's own initialisation; a model initialises or loads it anyway.
  weight = register_parameter("weight", torch::empty({out, in}));
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    bias = register_parameter("bias", torch::empty({out}).uniform_(-bound, bound));
  }
}

torch::Tensor LoraLinearImpl::forward(const torch::Tensor& x) {
  if (!adapter_) return BaseForward(x);
  // Rows of 2-D matrices: the base product is a fresh tensor that no
  // backward reads, so the adapter's product may accumulate into it.
  torch::Tensor y = BaseForward(x.reshape({-1, in_}));
  const torch::Tensor u = torch::nn::functional::linear(AdapterDropout(x).reshape({-1, in_}), lora_A->weight);
  y.addmm_(u, lora_B->weight.t(), /*beta=*/1, /*alpha=*/adapter_->scale());
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = out_;
  return y.view(shape);
}

torch::Tensor LoraLinearImpl::ForwardInFloat(const torch::Tensor& x) {
  TORCH_CHECK(!bias.defined() && !int8(), "ForwardInFloat: a projection without bias, not int8");
  namespace F = torch::nn::functional;
  const torch::Tensor input = x.to(torch::kFloat);
  torch::Tensor y = F::linear(input, weight.to(torch::kFloat));
  if (!adapter_) return y;
  const torch::Tensor u = F::linear(AdapterDropout(input), lora_A->weight.to(torch::kFloat));
  return y + F::linear(u, lora_B->weight.to(torch::kFloat)) * adapter_->scale();
}

torch::Tensor LoraLinearImpl::BaseForward(const torch::Tensor& x) const {
  if (int8()) return Int8LinearOp(x, weight_int8, weight_scale, bias, fused_kernels);
  return LinearOp(x, weight, bias, fused_kernels);
}

torch::Tensor LoraLinearImpl::AdapterDropout(const torch::Tensor& x) {
  TORCH_CHECK(adapter_, "this projection carries no LoRA adapter");
  const double p = adapter_->dropout;
  if (p == 0 || !is_training()) return x;
  if (input_parts > 1) {
    // Only the stream can draw the unsplit input's mask on every rank alike.
    TORCH_CHECK(dropout_stream != nullptr, "LoRA dropout on a split input needs the model's dropout stream");
    return dropout_stream->ApplyToPart(x, p, /*training=*/true, /*dim=*/-1, input_parts, input_part);
  }
  return dropout_stream != nullptr ? dropout_stream->Apply(x, p, /*training=*/true) : torch::dropout(x, p, true);
}

torch::Tensor LoraLinearImpl::AdapterDelta(const torch::Tensor& dropped, const torch::Tensor& a,
                                           const torch::Tensor& b) const {
  TORCH_CHECK(adapter_, "this projection carries no LoRA adapter");
  namespace F = torch::nn::functional;
  return F::linear(F::linear(dropped, a), b) * adapter_->scale();
}

void LoraLinearImpl::EnableAdapter(const LoraAdapterOptions& options, at::Generator generator) {
  TORCH_CHECK(!adapter_, "a LoRA adapter is already on this projection");
  TORCH_CHECK(!int8(), "a LoRA adapter on an int8 projection is not built (its forward reads the int8 values only)");
  TORCH_CHECK(options.r > 0, "LoRA rank r must be positive, got ", options.r);
  const auto like = torch::TensorOptions().dtype(weight.scalar_type()).device(weight.device());
  lora_A = register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(in_, options.r).bias(false)));
  lora_B = register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(options.r, out_).bias(false)));
  {
    torch::NoGradGuard no_grad;
    // PEFT: kaiming_uniform_(A, a=sqrt(5)) is uniform in ±1/sqrt(fan_in); B = 0.
    TORCH_CHECK(input_parts >= 1 && input_part >= 0 && input_part < input_parts, "input part ", input_part, " of ",
                input_parts);
    const int64_t whole_in = in_ * input_parts;
    const double bound = 1.0 / std::sqrt(static_cast<double>(whole_in));
    torch::Tensor a = torch::empty({options.r, whole_in}, torch::kFloat).uniform_(-bound, bound, generator);
    lora_A->weight.set_data(a.narrow(1, input_part * in_, in_).contiguous().to(like));
    lora_B->weight.set_data(torch::zeros({out_, options.r}, like));
  }
  weight.set_requires_grad(false);
  if (bias.defined()) bias.set_requires_grad(false);
  adapter_ = options;
}

torch::Tensor LoraLinearImpl::RowAbsMax() const {
  TORCH_CHECK(!int8(), "the projection is int8 already");
  torch::NoGradGuard no_grad;
  return weight.detach().to(torch::kFloat).abs().amax(1);
}

torch::Tensor LoraLinearImpl::ProductWithoutBias(const torch::Tensor& x) const {
  if (int8()) return Int8LinearOp(x, weight_int8, weight_scale, {}, fused_kernels);
  return LinearOp(x, weight, {}, fused_kernels);
}

void LoraLinearImpl::QuantizeInt8(const torch::Tensor& row_absmax) {
  TORCH_CHECK(!adapter_, "int8 weights with a LoRA adapter are not built (merge it first)");
  TORCH_CHECK(!int8(), "the projection is int8 already");
  torch::NoGradGuard no_grad;
  const torch::Tensor w = weight.detach().to(torch::kFloat);
  const torch::Tensor absmax = row_absmax.defined() ? row_absmax.to(w.device(), torch::kFloat) : w.abs().amax(1);
  TORCH_CHECK(absmax.dim() == 1 && absmax.size(0) == w.size(0), "int8 weights: ", absmax.numel(),
              " row maxima for ", w.size(0), " rows");
  const torch::Tensor scale = (absmax / 127.0).clamp_min(1e-12);  // [out]
  weight_int8 = register_buffer("weight_int8", (w / scale.unsqueeze(1)).round().clamp(-127, 127).to(torch::kChar));
  weight_scale = register_buffer("weight_scale", scale.to(weight.scalar_type()));
  weight.set_(torch::empty({0}, weight.options()));  // the float values' memory goes
}

void LoraLinearImpl::MergeAdapter() {
  TORCH_CHECK(adapter_, "this projection carries no LoRA adapter to merge");
  TORCH_CHECK(!int8(), "an int8 projection has no float weight to merge into");
  torch::NoGradGuard no_grad;
  weight.copy_(MergedWeight());
  unregister_module("lora_A");
  unregister_module("lora_B");
  lora_A = torch::nn::Linear(nullptr);
  lora_B = torch::nn::Linear(nullptr);
  adapter_.reset();
}

torch::Tensor LoraLinearImpl::MergedWeight() const {
  TORCH_CHECK(!int8(), "an int8 projection has no float weight to merge or export");
  torch::NoGradGuard no_grad;
  if (!adapter_) return weight.detach();
  torch::Tensor delta = torch::matmul(lora_B->weight.to(torch::kFloat), lora_A->weight.to(torch::kFloat));
  return (weight.to(torch::kFloat) + delta * adapter_->scale()).to(weight.scalar_type());
}

}  // namespace dslaunch::runtime

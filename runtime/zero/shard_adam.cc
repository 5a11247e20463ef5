#include "runtime/zero/shard_adam.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "kernels/cpu_adam.h"
#include "runtime/zero/fused_adamw_step.h"

namespace dslaunch::runtime {

ShardAdam::ShardAdam(const OptimizerConfig& config, const torch::Tensor& like, bool host_kernel)
    : eps_(config.eps),
      weight_decay_(config.weight_decay),
      decoupled_(absl::AsciiStrToLower(config.type) == "adamw" ||
                 (absl::AsciiStrToLower(config.type) == "adam" && config.adam_w_mode)),
      host_kernel_(host_kernel),
      exp_avg_(torch::zeros_like(like, torch::kFloat)),
      exp_avg_sq_(torch::zeros_like(like, torch::kFloat)) {
  if (like.is_pinned()) {
    exp_avg_ = exp_avg_.pin_memory();
    exp_avg_sq_ = exp_avg_sq_.pin_memory();
  }
}

kernels::AdamWHyperparameters ShardAdam::Hyperparameters(double lr, double beta1, double beta2) const {
  kernels::AdamWHyperparameters h;
  h.lr = lr;
  h.beta1 = beta1;
  h.beta2 = beta2;
  h.eps = eps_;
  h.weight_decay = weight_decay_;
  h.decoupled = decoupled_;
  h.step = step_;
  return h;
}

kernels::AdamWHyperparameters ShardAdam::CountStep(double lr, double beta1, double beta2) {
  ++step_;
  return Hyperparameters(lr, beta1, beta2);
}

void ShardAdam::StepEntries(const std::vector<FusedAdamWEntry>& entries, double lr, double beta1, double beta2,
                            double grad_scale, const double* grad_norm_squared, double max_norm) {
  kernels::AdamWHyperparameters h = CountStep(lr, beta1, beta2);
  h.grad_scale = grad_scale;
  h.grad_norm_squared = grad_norm_squared;
  h.max_norm = max_norm;
  FusedAdamWStep(entries, h);
}

void ShardAdam::Step(torch::Tensor& p, const torch::Tensor& g, double lr, double beta1, double beta2,
                     double grad_scale) {
  torch::NoGradGuard no_grad;
  ++step_;
  StepTensors(p, g, exp_avg_, exp_avg_sq_, lr, beta1, beta2, grad_scale);
}

void ShardAdam::StepRange(torch::Tensor& p, const torch::Tensor& g, int64_t offset, int64_t length, double lr,
                          double beta1, double beta2, double grad_scale, const torch::Tensor& rounded) {
  torch::NoGradGuard no_grad;
  torch::Tensor piece = p.narrow(0, offset, length);
  torch::Tensor m = exp_avg_.narrow(0, offset, length);
  torch::Tensor v = exp_avg_sq_.narrow(0, offset, length);
  StepTensors(piece, g.narrow(0, offset, length), m, v, lr, beta1, beta2, grad_scale,
              rounded.defined() ? rounded.narrow(0, offset, length) : torch::Tensor());
}

void ShardAdam::StepTensors(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v, double lr,
                            double beta1, double beta2, double grad_scale, const torch::Tensor& rounded) {
  if (host_kernel_) {
    kernels::AdamParams adam;
    adam.lr = static_cast<float>(lr);
    adam.beta1 = static_cast<float>(beta1);
    adam.beta2 = static_cast<float>(beta2);
    adam.eps = static_cast<float>(eps_);
    adam.weight_decay = static_cast<float>(weight_decay_);
    adam.adamw = decoupled_;
    adam.step = step_;
    adam.grad_scale = grad_scale;
    torch::Tensor grad = g.contiguous();
    uint16_t* rounded_out = nullptr;
    if (rounded.defined()) {
      TORCH_CHECK(rounded.scalar_type() == torch::kBFloat16 && rounded.is_contiguous() && !rounded.is_cuda() &&
                      rounded.numel() == p.numel(),
                  "the bf16 copy of a host step must be a contiguous host bf16 tensor of the range's size");
      rounded_out = reinterpret_cast<uint16_t*>(rounded.data_ptr());
    }
    kernels::CpuAdamStep(adam, p.data_ptr<float>(), grad.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(),
                         p.numel(), rounded_out);
    return;
  }
  TORCH_CHECK(!rounded.defined(), "a bf16 copy of the step needs the host kernel");
  if (p.is_cuda() && FusedAdamWAvailable()) {
    // One pass over the shard instead of LibTorch's ten.
    kernels::AdamWHyperparameters h = Hyperparameters(lr, beta1, beta2);
    h.grad_scale = grad_scale;
    FusedAdamWStep({FusedAdamWEntry{p, g.contiguous(), m, v, {}}}, h);
    return;
  }
  torch::Tensor grad = grad_scale == 1.0 ? g : g.mul(grad_scale);
  if (weight_decay_ != 0) {
    if (decoupled_) {
      p.mul_(1 - lr * weight_decay_);
    } else {
      grad = grad.add(p, weight_decay_);
    }
  }
  m.mul_(beta1).add_(grad, 1 - beta1);
  v.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step_));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step_));
  torch::Tensor denom = (v.sqrt() / std::sqrt(bias_correction2)).add_(eps_);
  p.addcdiv_(m, denom, -lr / bias_correction1);
}

absl::Status ShardAdam::StepSwapped(SwappedShard& swapped, const torch::Tensor& g, double lr, double beta1,
                                    double beta2, double grad_scale,
                                    const std::function<absl::Status(int64_t, const torch::Tensor&)>& updated) {
  torch::NoGradGuard no_grad;
  ++step_;
  torch::Tensor grad = g.to(torch::kCPU, torch::kFloat);
  return swapped.ForEachGroup([&](int64_t offset, std::vector<torch::Tensor>& values) {
    StepTensors(values[0], grad.narrow(0, offset, values[0].numel()), values[1], values[2], lr, beta1, beta2,
                grad_scale);
    return updated(offset, values[0]);
  });
}

absl::Status ShardAdam::StageSwappedMoments(SwappedShard& swapped, bool read) {
  if (!read) {
    exp_avg_ = torch::zeros({swapped.elements()});
    exp_avg_sq_ = torch::zeros({swapped.elements()});
    return absl::OkStatus();
  }
  auto m = swapped.ReadWhole(1);
  if (!m.ok()) return m.status();
  auto v = swapped.ReadWhole(2);
  if (!v.ok()) return v.status();
  exp_avg_ = *m;
  exp_avg_sq_ = *v;
  return absl::OkStatus();
}

absl::Status ShardAdam::UnstageSwappedMoments(SwappedShard& swapped, bool write_back) {
  if (write_back) {
    if (absl::Status s = swapped.WriteWhole(1, exp_avg_); !s.ok()) return s;
    if (absl::Status s = swapped.WriteWhole(2, exp_avg_sq_); !s.ok()) return s;
  }
  exp_avg_ = torch::empty({0});
  exp_avg_sq_ = torch::empty({0});
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime

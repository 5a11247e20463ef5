#include "runtime/model/fused_ops.h"

#include "runtime/kernel_element_type.h"
#include "runtime/model/rotary_embedding.h"
#include "runtime/torch_compat.h"

#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
#include "kernels/cuda/bias_gelu.h"
#include "kernels/cuda/layer_norm.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rotary.h"
#include "kernels/cuda/softmax_cross_entropy.h"
#include "kernels/cuda/swiglu.h"
#endif

namespace dslaunch::runtime {

#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

kernels::ElementType TypeOf(const torch::Tensor& t) { return KernelElementType(t.scalar_type(), "fused op"); }

void CheckLaunch(cudaError_t status, const char* what) {
  TORCH_CHECK(status == cudaSuccess, what, ": ", cudaGetErrorString(status));
}

// A per-feature parameter of x [..., width]: same dtype and device, width elements.
void CheckParameter(const torch::Tensor& x, const torch::Tensor& p, const char* what) {
  TORCH_CHECK(x.scalar_type() == p.scalar_type(), what, ": input is ", x.scalar_type(), " but a parameter is ",
              p.scalar_type());
  TORCH_CHECK(x.is_cuda() && p.device() == x.device(), what, ": input and parameters must be on one CUDA device, got ",
              x.device(), " and ", p.device());
  TORCH_CHECK(p.numel() == x.size(-1), what, ": a parameter has ", p.numel(), " elements for an input of width ",
              x.size(-1));
}

torch::Tensor FloatScratch(int64_t elements, const torch::Tensor& like) {
  return torch::empty({elements}, like.options().dtype(torch::kFloat));
}

class LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                               double eps) {
    CheckParameter(x, weight, "fused LayerNorm");
    CheckParameter(x, bias, "fused LayerNorm");
    compat::CudaDeviceGuard device(x.device());
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int64_t width = x.size(-1), rows = x.numel() / width;
    torch::Tensor y = torch::empty_like(x);
    torch::Tensor mean = FloatScratch(rows, x), rstd = FloatScratch(rows, x);
    CheckLaunch(kernels::layer_norm_forward(TypeOf(x), y.data_ptr(), mean.data_ptr<float>(), rstd.data_ptr<float>(),
                                            x.data_ptr(), weight.data_ptr(), bias.data_ptr(), rows, width,
                                            static_cast<float>(eps), compat::CurrentCudaStream()),
                "fused LayerNorm forward");
    ctx->save_for_backward({x, weight, bias, mean, rstd});
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &bias = saved[2], &mean = saved[3], &rstd = saved[4];
    compat::CudaDeviceGuard device(x.device());
    torch::Tensor dy = grads[0].contiguous();
    const int64_t width = x.size(-1), rows = x.numel() / width;
    torch::Tensor dx = torch::empty_like(x), dweight = torch::empty_like(weight), dbias = torch::empty_like(bias);
    torch::Tensor scratch = FloatScratch(kernels::layer_norm_backward_scratch(rows, width), x);
    CheckLaunch(
        kernels::layer_norm_backward(TypeOf(x), dx.data_ptr(), dweight.data_ptr(), dbias.data_ptr(), dy.data_ptr(),
                                     x.data_ptr(), weight.data_ptr(), mean.data_ptr<float>(), rstd.data_ptr<float>(),
                                     rows, width, scratch.data_ptr<float>(), compat::CurrentCudaStream()),
        "fused LayerNorm backward");
    return {dx, dweight, dbias, torch::Tensor()};
  }
};

class BiasGeluFunction : public torch::autograd::Function<BiasGeluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor bias) {
    CheckParameter(x, bias, "fused bias+GELU");
    compat::CudaDeviceGuard device(x.device());
    x = x.contiguous();
    bias = bias.contiguous();
    const int64_t width = x.size(-1), rows = x.numel() / width;
    torch::Tensor y = torch::empty_like(x);
    CheckLaunch(kernels::bias_gelu_forward(TypeOf(x), y.data_ptr(), x.data_ptr(), bias.data_ptr(), rows, width,
                                           compat::CurrentCudaStream()),
                "fused bias+GELU forward");
    ctx->save_for_backward({x, bias});
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &bias = saved[1];
    compat::CudaDeviceGuard device(x.device());
    torch::Tensor dy = grads[0].contiguous();
    const int64_t width = x.size(-1), rows = x.numel() / width;
    torch::Tensor dx = torch::empty_like(x), dbias = torch::empty_like(bias);
    torch::Tensor scratch = FloatScratch(kernels::bias_gelu_backward_scratch(rows, width), x);
    CheckLaunch(kernels::bias_gelu_backward(TypeOf(x), dx.data_ptr(), dbias.data_ptr(), dy.data_ptr(), x.data_ptr(),
                                            bias.data_ptr(), rows, width, scratch.data_ptr<float>(),
                                            compat::CurrentCudaStream()),
                "fused bias+GELU backward");
    return {dx, dbias};
  }
};

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight, double eps) {
    CheckParameter(x, weight, "fused RMSNorm");
    compat::CudaDeviceGuard device(x.device());
    x = x.contiguous();
    weight = weight.contiguous();
    const int64_t width = x.size(-1), rows = x.numel() / width;
    torch::Tensor y = torch::empty_like(x);
    torch::Tensor rstd = FloatScratch(rows, x);
    CheckLaunch(kernels::rms_norm_forward(TypeOf(x), y.data_ptr(), rstd.data_ptr<float>(), x.data_ptr(),
                                          weight.data_ptr(), rows, width, static_cast<float>(eps),
                                          compat::CurrentCudaStream()),
                "fused RMSNorm forward");
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2];
    compat::CudaDeviceGuard device(x.device());
    torch::Tensor dy = grads[0].contiguous();
    const int64_t width = x.size(-1), rows = x.numel() / width;
    torch::Tensor dx = torch::empty_like(x), dweight = torch::empty_like(weight);
    torch::Tensor scratch = FloatScratch(kernels::rms_norm_backward_scratch(rows, width), x);
    CheckLaunch(kernels::rms_norm_backward(TypeOf(x), dx.data_ptr(), dweight.data_ptr(), dy.data_ptr(), x.data_ptr(),
                                           weight.data_ptr(), rstd.data_ptr<float>(), rows, width,
                                           scratch.data_ptr<float>(), compat::CurrentCudaStream()),
                "fused RMSNorm backward");
    return {dx, dweight, torch::Tensor()};
  }
};

class SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor gate, torch::Tensor up) {
    TORCH_CHECK(gate.sizes() == up.sizes() && gate.scalar_type() == up.scalar_type() && gate.is_cuda() &&
                    up.device() == gate.device(),
                "fused SwiGLU: gate and up must have one shape, dtype and CUDA device, got ", gate.sizes(), " ",
                gate.scalar_type(), " ", gate.device(), " and ", up.sizes(), " ", up.scalar_type(), " ", up.device());
    compat::CudaDeviceGuard device(gate.device());
    gate = gate.contiguous();
    up = up.contiguous();
    torch::Tensor y = torch::empty_like(gate);
    CheckLaunch(kernels::swiglu_forward(TypeOf(gate), y.data_ptr(), gate.data_ptr(), up.data_ptr(), gate.numel(),
                                        compat::CurrentCudaStream()),
                "fused SwiGLU forward");
    ctx->save_for_backward({gate, up});
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &gate = saved[0], &up = saved[1];
    compat::CudaDeviceGuard device(gate.device());
    torch::Tensor dy = grads[0].contiguous();
    torch::Tensor dgate = torch::empty_like(gate), dup = torch::empty_like(up);
    CheckLaunch(kernels::swiglu_backward(TypeOf(gate), dgate.data_ptr(), dup.data_ptr(), dy.data_ptr(),
                                         gate.data_ptr(), up.data_ptr(), gate.numel(), compat::CurrentCudaStream()),
                "fused SwiGLU backward");
    return {dgate, dup};
  }
};

// gate_up [..., 2·cols]: gate then up along the last dimension (Note [Stacked
// projections]); its gradient comes back whole, in its layout.
class SwiGluStackedFunction : public torch::autograd::Function<SwiGluStackedFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor gate_up) {
    TORCH_CHECK(gate_up.is_cuda() && gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0,
                "fused stacked SwiGLU: a CUDA tensor whose last dimension is even, got ", gate_up.sizes(), " on ",
                gate_up.device());
    compat::CudaDeviceGuard device(gate_up.device());
    gate_up = gate_up.contiguous();
    const int64_t cols = gate_up.size(-1) / 2, rows = cols == 0 ? 0 : gate_up.numel() / (2 * cols);
    std::vector<int64_t> shape = gate_up.sizes().vec();
    shape.back() = cols;
    torch::Tensor y = torch::empty(shape, gate_up.options());
    CheckLaunch(kernels::swiglu_stacked_forward(TypeOf(gate_up), y.data_ptr(), gate_up.data_ptr(), rows, cols,
                                                compat::CurrentCudaStream()),
                "fused stacked SwiGLU forward");
    ctx->save_for_backward({gate_up});
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const torch::Tensor gate_up = ctx->get_saved_variables()[0];
    compat::CudaDeviceGuard device(gate_up.device());
    torch::Tensor dy = grads[0].contiguous();
    const int64_t cols = gate_up.size(-1) / 2, rows = cols == 0 ? 0 : gate_up.numel() / (2 * cols);
    torch::Tensor dgate_up = torch::empty_like(gate_up);
    CheckLaunch(kernels::swiglu_stacked_backward(TypeOf(gate_up), dgate_up.data_ptr(), dy.data_ptr(),
                                                 gate_up.data_ptr(), rows, cols, compat::CurrentCudaStream()),
                "fused stacked SwiGLU backward");
    return {dgate_up};
  }
};

class RotaryFunction : public torch::autograd::Function<RotaryFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor cos, torch::Tensor sin) {
    TORCH_CHECK(x.dim() == 4 && x.is_cuda() && cos.device() == x.device() && sin.device() == x.device() &&
                    cos.scalar_type() == x.scalar_type() && sin.scalar_type() == x.scalar_type() &&
                    cos.sizes() == sin.sizes(),
                "fused rotary: x [batch, heads, time, head_dim] with cos and sin of its dtype on its CUDA device, got ",
                x.sizes(), " ", x.scalar_type(), " ", x.device(), ", cos ", cos.sizes(), " ", cos.scalar_type(), " ",
                cos.device());
    const int64_t batch = x.size(0), time = x.size(2), dim = x.size(3);
    const bool per_sequence = cos.dim() == 4;
    TORCH_CHECK((cos.dim() == 2 && cos.size(0) == time && cos.size(1) == dim) ||
                    (per_sequence && cos.size(0) == batch && cos.size(1) == 1 && cos.size(2) == time &&
                     cos.size(3) == dim),
                "fused rotary: cos and sin must be [time, head_dim] or [batch, 1, time, head_dim] for x ", x.sizes(),
                ", got ", cos.sizes());
    compat::CudaDeviceGuard device(x.device());
    if (x.stride(3) != 1) x = x.contiguous();
    cos = cos.contiguous();
    sin = sin.contiguous();
    torch::Tensor y = torch::empty_like(x);  // x's layout (dense: the strides are kept)
    Launch(y, x, cos, sin, per_sequence, /*transpose=*/false);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["per_sequence"] = per_sequence;
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    torch::Tensor dy = grads[0];
    compat::CudaDeviceGuard device(dy.device());
    if (dy.stride(3) != 1 || !dy.is_non_overlapping_and_dense()) dy = dy.contiguous();
    torch::Tensor dx = torch::empty_like(dy);
    Launch(dx, dy, saved[0], saved[1], ctx->saved_data["per_sequence"].toBool(), /*transpose=*/true);
    return {dx, torch::Tensor(), torch::Tensor()};
  }

 private:
  static void Launch(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& cos,
                     const torch::Tensor& sin, bool per_sequence, bool transpose) {
    kernels::RotaryShape shape;
    shape.batch = x.size(0);
    shape.heads = x.size(1);
    shape.time = x.size(2);
    shape.head_dim = x.size(3);
    for (int d = 0; d < 3; ++d) {
      shape.in_strides[d] = x.stride(d);
      shape.out_strides[d] = y.stride(d);
    }
    TORCH_CHECK(y.stride(3) == 1, "fused rotary: the output's last dimension is not contiguous");
    shape.cos_batch_stride = per_sequence ? shape.time * shape.head_dim : 0;
    CheckLaunch(kernels::rotary_apply(TypeOf(x), y.data_ptr(), x.data_ptr(), cos.data_ptr(), sin.data_ptr(), shape,
                                      transpose, compat::CurrentCudaStream()),
                transpose ? "fused rotary backward" : "fused rotary forward");
  }
};

// Returns the per-row losses [rows] (fp32, 0 where the target is -100); the
// caller averages them over the rows that count.
class CrossEntropyFunction : public torch::autograd::Function<CrossEntropyFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor logits, torch::Tensor targets) {
    TORCH_CHECK(logits.is_cuda() && targets.device() == logits.device(),
                "fused cross-entropy: logits and targets must be on one CUDA device, got ", logits.device(), " and ",
                targets.device());
    compat::CudaDeviceGuard device(logits.device());
    TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
                "fused cross-entropy: logits [rows, vocab] and targets [rows], got ", logits.sizes(), " and ",
                targets.sizes());
    logits = logits.contiguous();
    targets = targets.to(torch::kLong).contiguous();
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    torch::Tensor loss = FloatScratch(rows, logits), lse = FloatScratch(rows, logits);
    CheckLaunch(kernels::softmax_cross_entropy_forward(TypeOf(logits), loss.data_ptr<float>(), lse.data_ptr<float>(),
                                                       logits.data_ptr(), targets.data_ptr<int64_t>(), rows, vocab,
                                                       compat::CurrentCudaStream()),
                "fused cross-entropy forward");
    ctx->save_for_backward({logits, targets, lse});
    return loss;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &targets = saved[1], &lse = saved[2];
    compat::CudaDeviceGuard device(logits.device());
    torch::Tensor dloss = grads[0].to(torch::kFloat).contiguous();
    torch::Tensor dlogits = torch::empty_like(logits);
    CheckLaunch(kernels::softmax_cross_entropy_backward(TypeOf(logits), dlogits.data_ptr(), logits.data_ptr(),
                                                        lse.data_ptr<float>(), targets.data_ptr<int64_t>(),
                                                        dloss.data_ptr<float>(), logits.size(0), logits.size(1),
                                                        compat::CurrentCudaStream()),
                "fused cross-entropy backward");
    return {dlogits, torch::Tensor()};
  }
};

}  // namespace

bool FusedKernelsBuilt() { return true; }
#else
bool FusedKernelsBuilt() { return false; }
#endif

void CheckFusedAvailable(const torch::Tensor& x, const char* what) {
  TORCH_CHECK(x.is_cuda(), what, ": fused kernels run on CUDA tensors, this one is on ", x.device());
  TORCH_CHECK(FusedKernelsBuilt(), what, ": this build has no CUDA kernels (nvcc was not found at configure time)");
}

torch::Tensor LayerNormOp(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, double eps,
                          bool fused) {
  if (!fused) return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  CheckFusedAvailable(x, "LayerNorm");
  if (x.numel() == 0) return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);  // nothing to compute
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
  return LayerNormFunction::apply(x, weight, bias, eps);
#else
  return {};
#endif
}

torch::Tensor BiasGeluOp(const torch::Tensor& x, const torch::Tensor& bias, bool fused) {
  if (!fused) return torch::gelu(x + bias, "tanh");
  CheckFusedAvailable(x, "bias+GELU");
  if (x.numel() == 0) return torch::gelu(x + bias, "tanh");  // nothing to compute
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
  return BiasGeluFunction::apply(x, bias);
#else
  return {};
#endif
}

torch::Tensor CrossEntropyOp(const torch::Tensor& logits, const torch::Tensor& targets, bool fused) {
  if (!fused) return torch::nn::functional::cross_entropy(logits.to(torch::kFloat), targets);
  CheckFusedAvailable(logits, "cross-entropy");
  if (logits.numel() == 0) return torch::nn::functional::cross_entropy(logits.to(torch::kFloat), targets);
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
  return CrossEntropyFunction::apply(logits, targets).sum() /
         targets.ne(kernels::kIgnoredTarget).sum().to(torch::kFloat);
#else
  return {};
#endif
}

torch::Tensor RmsNormOp(const torch::Tensor& x, const torch::Tensor& weight, double eps, bool fused) {
  auto reference = [&] {
    torch::Tensor h = x.to(torch::kFloat);
    h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
    return weight * h.to(x.scalar_type());
  };
  if (!fused) return reference();
  CheckFusedAvailable(x, "RMSNorm");
  if (x.numel() == 0) return reference();  // nothing to compute
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
  return RmsNormFunction::apply(x, weight, eps);
#else
  return {};
#endif
}

std::pair<torch::Tensor, torch::Tensor> AddRmsNormOp(const torch::Tensor& x, const torch::Tensor& delta,
                                                     const torch::Tensor& weight, double eps, bool fused) {
  const bool records_autograd =
      torch::GradMode::is_enabled() && (x.requires_grad() || delta.requires_grad() || weight.requires_grad());
  if (!fused || records_autograd || x.numel() == 0 || x.sizes() != delta.sizes() ||
      x.scalar_type() != delta.scalar_type()) {
    torch::Tensor sum = x + delta;
    return {sum, RmsNormOp(sum, weight, eps, fused)};
  }
  CheckFusedAvailable(x, "RMSNorm with a residual");
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
  CheckParameter(x, weight, "fused RMSNorm with a residual");
  TORCH_CHECK(delta.device() == x.device(), "fused RMSNorm with a residual: x is on ", x.device(), ", delta on ",
              delta.device());
  compat::CudaDeviceGuard device(x.device());
  const torch::Tensor a = x.contiguous(), b = delta.contiguous(), w = weight.contiguous();
  torch::Tensor sum = torch::empty_like(a), y = torch::empty_like(a);
  const int64_t width = a.size(-1), rows = a.numel() / width;
  CheckLaunch(kernels::rms_norm_residual_forward(TypeOf(a), y.data_ptr(), sum.data_ptr(), a.data_ptr(), b.data_ptr(),
                                                 w.data_ptr(), rows, width, static_cast<float>(eps),
                                                 compat::CurrentCudaStream()),
              "fused RMSNorm with a residual");
  return {sum, y};
#else
  return {};
#endif
}

torch::Tensor RotaryOp(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool fused) {
  if (!fused) return ApplyRotary(x, cos, sin);
  CheckFusedAvailable(x, "rotary");
  if (x.numel() == 0) return ApplyRotary(x, cos, sin);  // nothing to compute
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
  return RotaryFunction::apply(x, cos, sin);
#else
  return {};
#endif
}

torch::Tensor SwiGluStackedOp(const torch::Tensor& gate_up, bool fused) {
  TORCH_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0,
              "SwiGLU of a stacked gate/up product: the last dimension must be even, got ", gate_up.sizes());
  auto unfused = [&] {
    const std::vector<torch::Tensor> halves = gate_up.chunk(2, -1);
    return torch::silu(halves[0]) * halves[1];
  };
  if (!fused) return unfused();
  CheckFusedAvailable(gate_up, "SwiGLU");
  if (gate_up.numel() == 0) return unfused();  // nothing to compute
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
  return SwiGluStackedFunction::apply(gate_up);
#else
  return {};
#endif
}

torch::Tensor SwiGluOp(const torch::Tensor& gate, const torch::Tensor& up, bool fused) {
  if (!fused) return torch::silu(gate) * up;
  CheckFusedAvailable(gate, "SwiGLU");
  if (gate.numel() == 0) return torch::silu(gate) * up;  // nothing to compute
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
  return SwiGluFunction::apply(gate, up);
#else
  return {};
#endif
}

}  // namespace dslaunch::runtime

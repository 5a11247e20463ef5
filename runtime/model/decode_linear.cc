#include "runtime/model/decode_linear.h"

#include <algorithm>
#include <optional>

#include "runtime/kernel_element_type.h"
#include "runtime/model/fused_ops.h"
#include "runtime/torch_compat.h"

#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
#include "kernels/cuda/decode_linear.h"
#endif

namespace dslaunch::runtime {
namespace {

thread_local bool constant_weights = false;

torch::Tensor LibTorchInt8Linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& scale,
                                 const torch::Tensor& bias) {
  torch::Tensor y = torch::nn::functional::linear(x, weight.to(x.scalar_type())) * scale;
  return bias.defined() ? y + bias : y;
}

#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
bool RecordsAutograd(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return torch::GradMode::is_enabled() &&
         (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
}

// A per-output-row vector (scale, bias) the kernel can read, when defined.
bool UsableRowVector(const torch::Tensor& v, const torch::Tensor& x, int64_t out) {
  return !v.defined() || (v.scalar_type() == x.scalar_type() && v.device() == x.device() && v.is_contiguous() &&
                          v.numel() == out);
}

// The kernel's arguments for x (contiguous) against these weights, without
// the output; nullopt when the kernel does not take the call.
std::optional<kernels::DecodeLinearArgs> Plan(const torch::Tensor& x, const torch::Tensor& weight,
                                              const torch::Tensor& scale, const torch::Tensor& bias) {
  const bool int8 = scale.defined();
  if (!x.is_cuda() || x.dim() < 1 || x.numel() == 0 || weight.dim() != 2 || x.size(-1) != weight.size(1) ||
      weight.device() != x.device() || !weight.is_contiguous() || RecordsAutograd(x, weight, bias)) {
    return std::nullopt;
  }
  const torch::ScalarType type = x.scalar_type();
  if (type != torch::kFloat && type != torch::kBFloat16 && type != torch::kHalf) return std::nullopt;
  if (weight.scalar_type() != (int8 ? torch::kChar : type)) return std::nullopt;
  const int64_t out = weight.size(0);
  if (!UsableRowVector(scale, x, out) || !UsableRowVector(bias, x, out)) return std::nullopt;
  kernels::DecodeLinearArgs args;
  args.type = KernelElementType(type, "decode linear");
  args.int8_weight = int8;
  args.in = x.size(-1);
  args.rows = x.numel() / args.in;
  args.out = out;
  args.x = x.data_ptr();
  args.weight = weight.data_ptr();
  args.scale = int8 ? scale.data_ptr() : nullptr;
  args.bias = bias.defined() ? bias.data_ptr() : nullptr;
  args.y = x.data_ptr();  // a stand-in for the check; the output is allocated once the call is taken
  if (!kernels::decode_linear_supported(args)) return std::nullopt;
  return args;
}

std::optional<torch::Tensor> RunKernel(const torch::Tensor& input, const torch::Tensor& weight,
                                       const torch::Tensor& scale, const torch::Tensor& bias) {
  if (input.numel() == 0 || input.numel() / std::max<int64_t>(1, input.size(-1)) > kernels::kDecodeLinearMaxInt8Rows) {
    return std::nullopt;  // before any copy: most calls with many rows end here
  }
  const torch::Tensor x = input.contiguous();
  std::optional<kernels::DecodeLinearArgs> args = Plan(x, weight, scale, bias);
  if (!args) return std::nullopt;
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = args->out;
  torch::Tensor y = torch::empty(shape, x.options());
  args->y = y.data_ptr();
  args->weights_constant = ConstantWeightsScope::active();
  compat::CudaDeviceGuard device(x.device());
  const cudaError_t status = kernels::decode_linear(*args, compat::CurrentCudaStream());
  TORCH_CHECK(status == cudaSuccess, "decode linear: ", cudaGetErrorString(status));
  return y;
}
#endif

}  // namespace

ConstantWeightsScope::ConstantWeightsScope() : previous_(constant_weights) { constant_weights = true; }
ConstantWeightsScope::~ConstantWeightsScope() { constant_weights = previous_; }
bool ConstantWeightsScope::active() { return constant_weights; }

bool UsesDecodeLinearKernel(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& scale,
                            const torch::Tensor& bias) {
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
  if (x.numel() == 0 || x.numel() / std::max<int64_t>(1, x.size(-1)) > kernels::kDecodeLinearMaxInt8Rows) return false;
  return Plan(x.contiguous(), weight, scale, bias).has_value();
#else
  (void)x, (void)weight, (void)scale, (void)bias;
  return false;
#endif
}

torch::Tensor LinearOp(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, bool fused) {
  if (fused) {
    CheckFusedAvailable(x, "linear");
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
    if (std::optional<torch::Tensor> y = RunKernel(x, weight, {}, bias)) return *y;
#endif
  }
  return torch::nn::functional::linear(x, weight, bias);
}

torch::Tensor Int8LinearOp(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& scale,
                           const torch::Tensor& bias, bool fused) {
  TORCH_CHECK(weight.scalar_type() == torch::kChar && scale.defined(),
              "an int8 linear takes int8 weights and their scales, got ", weight.scalar_type(), " weights");
  if (fused) {
    CheckFusedAvailable(x, "int8 linear");
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
    if (std::optional<torch::Tensor> y = RunKernel(x, weight, scale, bias)) return *y;
#endif
  }
  return LibTorchInt8Linear(x, weight, scale, bias);
}

}  // namespace dslaunch::runtime

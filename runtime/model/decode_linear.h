// Note [Decode linear]: the linear layers of a decode step.
//
// A decode step runs each linear layer on a few rows (one per sequence that
// decodes), where the layer is a matrix-vector product bounded by the
// bandwidth at which it reads its weights. With `fused`, a call that records
// no autograd and has at most kernels::kDecodeLinearMaxRows rows (2; with
// int8 weights kDecodeLinearMaxInt8Rows, 8) runs kernels/cuda/decode_linear.h
// (one warp per output row, the weights streamed once; the header gives the
// measurements behind the limits); anything else (more rows, autograd, a
// weight that is not contiguous
// and 16-byte aligned, an `in` that is no whole number of 16-byte loads) is
// LibTorch's linear, the same arithmetic on cuBLAS. Which of the two runs is
// a matter of shape, as cuBLAS picks among its own kernels; both sum in fp32
// and round once, so they differ by the order of the sum only.
//
// Without `fused` both functions are LibTorch's computation. With `fused`
// they must get CUDA tensors in a build with the kernels (fused_ops.h).
#pragma once

#include <torch/torch.h>

namespace dslaunch::runtime {

// y = x·weightᵀ + bias as torch::nn::functional::linear: x [..., in], weight
// [out, in], bias [out] or undefined.
torch::Tensor LinearOp(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, bool fused);

// The int8 form (Note [Int8 weights]): weight [out, in] int8 and scale [out]
// in x's dtype; y = (x·weightᵀ)·scale + bias. LibTorch's path widens the
// weight to x's dtype first; the kernel reads the int8 rows as they are.
torch::Tensor Int8LinearOp(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& scale,
                           const torch::Tensor& bias, bool fused);

// While one lives on a thread, the decode kernel launched from that thread
// takes the weights as constant (kernels::DecodeLinearArgs::weights_constant):
// it may read them before the kernel ahead of it ends (Note [Dependent
// launch], kernels/cuda/dependent_launch.cuh). For a generation engine's
// forwards, where nothing writes a weight while steps run; a forward whose
// weights something may write just before it (training, weights streamed
// into slots) leaves it out. Nests.
class ConstantWeightsScope {
 public:
  ConstantWeightsScope();
  ~ConstantWeightsScope();
  ConstantWeightsScope(const ConstantWeightsScope&) = delete;
  ConstantWeightsScope& operator=(const ConstantWeightsScope&) = delete;
  static bool active();

 private:
  bool previous_;
};

// Whether a call would take the kernel (for tests and the benchmark).
bool UsesDecodeLinearKernel(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& scale,
                            const torch::Tensor& bias);

}  // namespace dslaunch::runtime

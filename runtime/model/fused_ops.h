// The model's fused operations: LibTorch autograd functions over the CUDA
// kernels of kernels/cuda, with the plain LibTorch computation as the
// reference. `fused` picks the kernels; it must only be true for CUDA
// tensors in a build that has them (FusedKernelsBuilt()), otherwise the call
// throws: a model asked for fused kernels never quietly runs without them.
//
// Inputs are checked (parameters of the input's dtype, device and width;
// targets on the logits' device); an empty input has nothing to compute and
// takes LibTorch's path. Kernels launch on the tensors' device and its
// current stream.
//
// Each fused function saves what its backward needs and nothing more:
// LayerNorm its input and the per-row mean and rstd (fp32), RMSNorm its input
// and rstd, bias+GELU its input (the pre-bias linear output), SwiGLU its two
// inputs, cross-entropy the logits, targets and per-row log-sum-exp (no fp32
// copy of the logits, forward or backward).
#pragma once

#include <torch/torch.h>

#include <utility>

namespace dslaunch::runtime {

bool FusedKernelsBuilt();

// Throws c10::Error naming `what` unless x is a CUDA tensor and this build
// has the kernels.
void CheckFusedAvailable(const torch::Tensor& x, const char* what);

// torch::layer_norm over the last dimension.
torch::Tensor LayerNormOp(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                          double eps, bool fused);

// gelu(x + bias) with the tanh approximation; x [..., width], bias [width].
torch::Tensor BiasGeluOp(const torch::Tensor& x, const torch::Tensor& bias, bool fused);

// Mean cross-entropy of logits [rows, vocab] (any floating type) against
// int64 targets [rows], computed in fp32; returns an fp32 scalar. Targets of
// -100 carry no loss and the mean is over the others (PyTorch's
// ignore_index), NaN when there are none.
torch::Tensor CrossEntropyOp(const torch::Tensor& logits, const torch::Tensor& targets, bool fused);

// Hugging Face's LlamaRMSNorm over the last dimension: h = x·rsqrt(mean(x²) +
// eps) in fp32, rounded to x's type, times weight [width].
torch::Tensor RmsNormOp(const torch::Tensor& x, const torch::Tensor& weight, double eps, bool fused);

// The residual add before an RMSNorm: returns {sum, RmsNormOp(sum)} with
// sum = x + delta in x's dtype. Fused and recording no autograd (a decode
// step), one kernel computes both with the unfused pair's arithmetic;
// otherwise it is the add and RmsNormOp.
std::pair<torch::Tensor, torch::Tensor> AddRmsNormOp(const torch::Tensor& x, const torch::Tensor& delta,
                                                     const torch::Tensor& weight, double eps, bool fused);

// Rotary embedding (rotate-half) of x [batch, heads, time, head_dim] with cos
// and sin [time, head_dim] or [batch, 1, time, head_dim] in x's dtype:
// ApplyRotary's arithmetic (rotary_embedding.h); the result has x's layout.
torch::Tensor RotaryOp(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool fused);

// silu(gate) · up, Llama's gated MLP activation (same shapes).
torch::Tensor SwiGluOp(const torch::Tensor& gate, const torch::Tensor& up, bool fused);
// The same of gate_up [..., 2·n] holding gate then up along its last
// dimension (Note [Stacked projections]): [..., n]; fused, its gradient comes
// back whole instead of as two halves to join.
torch::Tensor SwiGluStackedOp(const torch::Tensor& gate_up, bool fused);

}  // namespace dslaunch::runtime

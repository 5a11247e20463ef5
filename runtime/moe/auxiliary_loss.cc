#include "runtime/moe/auxiliary_loss.h"

namespace dslaunch::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

LossGradientScale* CellOf(AutogradContext* ctx) {
  return reinterpret_cast<LossGradientScale*>(ctx->saved_data["cell"].toInt());
}

struct RecordScale : torch::autograd::Function<RecordScale> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& loss, int64_t cell) {
    ctx->saved_data["cell"] = cell;
    return loss.view_as(loss);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    CellOf(ctx)->scale = grads[0].detach().clone();
    return {grads[0], torch::Tensor()};
  }
};

struct Attach : torch::autograd::Function<Attach> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& output, const torch::Tensor& aux,
                               int64_t cell) {
    ctx->saved_data["cell"] = cell;
    ctx->saved_data["aux_dtype"] = static_cast<int64_t>(aux.scalar_type());
    return output.view_as(output);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor& scale = CellOf(ctx)->scale;
    TORCH_CHECK(scale.defined(),
                "a mixture-of-experts layer's auxiliary loss needs the "
                "backward to start at the model's Loss()");
    auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["aux_dtype"].toInt());
    return {grads[0], scale.reshape({}).to(dtype), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor RecordLossGradientScale(const torch::Tensor& loss, LossGradientScale* cell) {
  cell->scale = torch::Tensor();
  if (!loss.requires_grad()) return loss;
  return RecordScale::apply(loss, reinterpret_cast<int64_t>(cell));
}

torch::Tensor AttachAuxiliaryLoss(const torch::Tensor& output, const torch::Tensor& auxiliary_loss,
                                  LossGradientScale* cell) {
  if (!auxiliary_loss.requires_grad()) return output;
  return Attach::apply(output, auxiliary_loss, reinterpret_cast<int64_t>(cell));
}

}  // namespace dslaunch::runtime

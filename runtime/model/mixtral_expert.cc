#include "runtime/model/mixtral_expert.h"

#include "runtime/model/fused_ops.h"
#include "runtime/model/stacked_projections.h"

namespace dslaunch::runtime {

MixtralExpert::MixtralExpert(int64_t hidden, int64_t inner, bool fused_kernels) : fused_(fused_kernels) {
  auto projection = [fused_kernels](int64_t in, int64_t out) {
    LoraLinear made(in, out, /*bias=*/false);
    made->fused_kernels = fused_kernels;
    return made;
  };
  // Hugging Face's order, so parameters() lists them as its state dict does.
  w1 = register_module("w1", projection(hidden, inner));
  w2 = register_module("w2", projection(inner, hidden));
  w3 = register_module("w3", projection(hidden, inner));
}

torch::Tensor MixtralExpert::forward(const torch::Tensor& rows) {
  // Note [Stacked projections]: in training, gate and up as one product.
  if (torch::GradMode::is_enabled() && Stackable({w1, w3})) {
    return w2->forward(SwiGluStackedOp(StackedProduct({w1, w3}, rows, TensorParallelGroup{}), fused_));
  }
  return w2->forward(SwiGluOp(w1->forward(rows), w3->forward(rows), fused_));
}

}  // namespace dslaunch::runtime

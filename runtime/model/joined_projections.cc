#include "runtime/model/joined_projections.h"

#include "runtime/model/decode_linear.h"

namespace dslaunch::runtime {

bool JoinedProjections::Join(std::vector<LoraLinear> projections) {
  if (projections.empty()) return false;
  const bool biased = projections.front()->bias.defined();
  for (const LoraLinear& p : projections) {
    if (p->adapted() || p->int8() || p->bias.defined() != biased ||
        p->weight.size(1) != projections.front()->weight.size(1)) {
      return false;
    }
  }
  torch::NoGradGuard no_grad;
  auto join = [&](auto member) {
    std::vector<torch::Tensor> parts;
    for (LoraLinear& p : projections) parts.push_back(member(*p));
    torch::Tensor joined = torch::cat(parts, 0);
    int64_t row = 0;
    for (LoraLinear& p : projections) {
      torch::Tensor& part = member(*p);
      const int64_t rows = part.size(0);
      // The parameter keeps its identity (the module's list holds it); its
      // data becomes the rows of the joined tensor, and its own storage goes.
      part.set_data(joined.narrow(0, row, rows));
      row += rows;
    }
    return joined;
  };
  weight_ = join([](LoraLinearImpl& p) -> torch::Tensor& { return p.weight; });
  if (biased) bias_ = join([](LoraLinearImpl& p) -> torch::Tensor& { return p.bias; });
  fused_kernels_ = projections.front()->fused_kernels;
  projections_ = std::move(projections);
  return true;
}

bool JoinedProjections::usable() const {
  if (!weight_.defined() || torch::GradMode::is_enabled()) return false;
  for (const LoraLinear& p : projections_) {
    if (p->adapted() || p->int8() || !p->weight.is_alias_of(weight_)) return false;
    if (bias_.defined() && !p->bias.is_alias_of(bias_)) return false;
  }
  return true;
}

torch::Tensor JoinedProjections::Product(const torch::Tensor& x) const {
  return LinearOp(x, weight_, bias_, fused_kernels_);
}

std::vector<torch::Tensor> JoinedProjections::Forward(const torch::Tensor& x) const {
  const torch::Tensor y = Product(x);
  std::vector<torch::Tensor> outputs;
  int64_t column = 0;
  for (const LoraLinear& p : projections_) {
    const int64_t rows = p->weight.size(0);
    outputs.push_back(y.narrow(-1, column, rows));
    column += rows;
  }
  return outputs;
}

}  // namespace dslaunch::runtime

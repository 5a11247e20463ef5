#include "runtime/model/stacked_projections.h"

#include "runtime/model/decode_linear.h"
#include "runtime/tensor_parallel/tensor_parallel_ops.h"

namespace dslaunch::runtime {

bool Stackable(const std::vector<LoraLinear>& projections) {
  if (projections.empty()) return false;
  const LoraLinear& first = projections.front();
  for (const LoraLinear& projection : projections) {
    if (projection->int8() || !projection->weight.defined() || projection->weight.dim() != 2) return false;
    if (projection->weight.size(1) != first->weight.size(1) ||
        projection->weight.scalar_type() != first->weight.scalar_type() ||
        projection->weight.device() != first->weight.device() ||
        projection->bias.defined() != first->bias.defined()) {
      return false;
    }
  }
  return true;
}

torch::Tensor StackedProduct(const std::vector<LoraLinear>& projections, const torch::Tensor& x,
                             const TensorParallelGroup& group) {
  TORCH_CHECK(Stackable(projections), "these projections cannot run as one product");
  namespace F = torch::nn::functional;
  const int64_t in = projections.front()->weight.size(1);
  std::vector<torch::Tensor> weights, biases;
  int64_t outputs = 0;
  for (const LoraLinear& projection : projections) {
    weights.push_back(projection->weight);
    if (projection->bias.defined()) biases.push_back(projection->bias);
    outputs += projection->weight.size(0);
  }
  const torch::Tensor rows = x.reshape({-1, in});
  torch::Tensor y = LinearOp(rows, weights.size() == 1 ? weights[0] : torch::cat(weights),
                             biases.empty() ? torch::Tensor() : torch::cat(biases), projections.front()->fused_kernels);

  std::vector<LoraLinear> adapted;
  for (const LoraLinear& projection : projections) {
    if (projection->adapted()) adapted.push_back(projection);
  }
  if (!adapted.empty()) {
    auto a_of = [&](const LoraLinear& projection) {
      const torch::Tensor& a = projection->lora_A->weight;
      return group.split() ? ReplicatedWithPartialGradient(a, group) : a;
    };
    bool draws = false;
    const double scale = adapted.front()->adapter_options().scale();
    bool one_scale = true;
    for (const LoraLinear& projection : adapted) {
      draws = draws || (projection->adapter_options().dropout > 0 && projection->is_training());
      one_scale = one_scale && projection->adapter_options().scale() == scale;
    }
    torch::Tensor u;
    if (!draws) {
      std::vector<torch::Tensor> as;
      for (const LoraLinear& projection : adapted) as.push_back(a_of(projection));
      u = F::linear(rows, as.size() == 1 ? as[0] : torch::cat(as));
    } else {
      std::vector<torch::Tensor> us;
      for (LoraLinear projection : adapted) {  // a handle: AdapterDropout draws
        us.push_back(F::linear(projection->AdapterDropout(x).reshape({-1, in}), a_of(projection)));
      }
      u = torch::cat(us, /*dim=*/1);
    }
    std::vector<torch::Tensor> blocks;
    for (const LoraLinear& projection : projections) {
      if (!projection->adapted()) {
        blocks.push_back(torch::zeros({projection->weight.size(0), 0}, y.options()));
        continue;
      }
      const torch::Tensor& b = projection->lora_B->weight;
      blocks.push_back(one_scale ? b : b * projection->adapter_options().scale());
    }
    const torch::Tensor b = blocks.size() == 1 ? blocks[0] : torch::block_diag(blocks);
    y.addmm_(u, b.t(), /*beta=*/1, /*alpha=*/one_scale ? scale : 1.0);
  }
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = outputs;
  return y.view(shape);
}

}  // namespace dslaunch::runtime

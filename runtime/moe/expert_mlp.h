// The experts a mixture-of-experts layer is built from: the feed-forward
// networks of the model families, one module per expert. A family may bring
// its own (the Llama family's is runtime/model/mixtral_expert.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

namespace dslaunch::runtime {

class ExpertMlp : public torch::nn::Module {
 public:
  // [N, hidden] → [N, hidden].
  virtual torch::Tensor forward(const torch::Tensor& rows) = 0;
};

// GPT's MLP: fc (hidden → inner, bias), tanh-GELU, fc_projection (inner →
// hidden, bias).
class GeluExpert : public ExpertMlp {
 public:
  GeluExpert(int64_t hidden, int64_t inner);
  torch::Tensor forward(const torch::Tensor& rows) override;

  torch::nn::Linear fc{nullptr};
  torch::nn::Linear fc_projection{nullptr};
};

}  // namespace dslaunch::runtime

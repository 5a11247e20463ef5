#include "runtime/moe/expert_mlp.h"

namespace dslaunch::runtime {

GeluExpert::GeluExpert(int64_t hidden, int64_t inner) {
  fc = register_module("fc", torch::nn::Linear(hidden, inner));
  fc_projection = register_module("fc_projection", torch::nn::Linear(inner, hidden));
}

torch::Tensor GeluExpert::forward(const torch::Tensor& rows) {
  return fc_projection->forward(torch::gelu(fc->forward(rows), "tanh"));
}

}  // namespace dslaunch::runtime

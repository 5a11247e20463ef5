#include "runtime/moe/expert_mlp.h"

namespace dslaunch::runtime {

GeluExpert::GeluExpert(int64_t hidden, int64_t inner) {
  fc = register_module("fc", torch::nn::Linear(hidden, inner));
  fc_projection = register_module("fc_projection", torch::nn::Linear(inner, hidden));
}

torch::Tensor GeluExpert::forward(const torch::Tensor& rows) {
  return fc_projection->forward(torch::gelu(fc->forward(rows), "tanh"));
}

SwiGluExpert::SwiGluExpert(int64_t hidden, int64_t inner) {
  auto linear = [](int64_t in, int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
  };
  w1 = register_module("w1", linear(hidden, inner));
  w2 = register_module("w2", linear(inner, hidden));
  w3 = register_module("w3", linear(hidden, inner));
}

torch::Tensor SwiGluExpert::forward(const torch::Tensor& rows) {
  return w2->forward(torch::silu(w1->forward(rows)) * w3->forward(rows));
}

}  // namespace dslaunch::runtime

// Test support: three projections of one 16-wide input, q/k/v-like (12, 4
// and 4 outputs, as grouped-query attention's), with normal weights (and
// biases) drawn from `seed`. Header-only.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "runtime/model/lora_linear.h"

namespace dslaunch::runtime::testing {

inline std::vector<LoraLinear> QkvTestProjections(bool bias, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<LoraLinear> projections = {LoraLinear(16, 12, bias), LoraLinear(16, 4, bias), LoraLinear(16, 4, bias)};
  for (LoraLinear& p : projections) {
    torch::NoGradGuard no_grad;
    p->weight.normal_();
    if (bias) p->bias.normal_();
  }
  return projections;
}

}  // namespace dslaunch::runtime::testing

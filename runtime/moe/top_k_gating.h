// Routing tokens to experts with DeepSpeed's top-1, top-2 and top-k gating
// (Note [Mixture of experts]).
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "runtime/moe/moe_options.h"

namespace dslaunch::runtime {

struct Routing {
  torch::Tensor experts;   // [T, k] int64: each token's chosen experts, best first
  torch::Tensor weights;   // [T, k] fp32: combine weights (0 where dropped); differentiable
  torch::Tensor kept;      // [T, k] bool: the (token, choice) reaches its expert
  torch::Tensor counts;    // [E] int64: kept (token, choice) pairs per expert
  int64_t capacity = 0;    // pairs an expert keeps at most; 0: dropless
  torch::Tensor aux_loss;  // fp32 scalar, differentiable: the load-balancing loss
  torch::Tensor z_loss;    // fp32 scalar, differentiable: mean(logsumexp(logits)²)
  torch::Tensor dropped;   // fp32 scalar: the fraction of pairs dropped
};

// ceil(k·tokens/experts·factor), at least min_capacity.
int64_t ExpertCapacity(int64_t tokens, int64_t experts, int64_t k, double factor, int64_t min_capacity);

// `logits`: [T, E] fp32, the router's output for T tokens. Training selects
// the training capacity factor and the noise (RSample's Gumbel noise, top-2's
// sampled second expert, RTS's random priorities), drawn from LibTorch's
// default CPU generator (so activation checkpointing replays them and
// checkpoints carry their state).
Routing RouteTokens(const torch::Tensor& logits, const GatingOptions& options, bool training);

}  // namespace dslaunch::runtime

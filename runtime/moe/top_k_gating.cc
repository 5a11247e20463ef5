#include "runtime/moe/top_k_gating.h"

#include <cmath>
#include <limits>

namespace dslaunch::runtime {
namespace {

torch::Tensor CpuUniform(at::IntArrayRef shape) {
  return torch::rand(shape, torch::TensorOptions().dtype(torch::kFloat));
}

// Gumbel(0, 1) noise, drawn on the CPU and moved to `like`'s device.
torch::Tensor Gumbel(const torch::Tensor& like) {
  torch::Tensor u = CpuUniform(like.sizes()).clamp_(1e-10, 1.0 - 1e-7);
  return (-(-u.log()).log()).to(like.device());
}

// The position of each (token, choice) pair in its expert's queue: first
// choices in token order, then second choices, ... ([T, k] int64).
torch::Tensor QueuePositions(const torch::Tensor& experts, int64_t num_experts) {
  const int64_t tokens = experts.size(0), k = experts.size(1);
  // [k·T, E]: choice-major, so every first choice queues before any second.
  torch::Tensor one_hot = torch::one_hot(experts.t().reshape({-1}), num_experts);
  // Scanned with the pairs as the innermost dimension ([E, k·T]): LibTorch
  // scans an outer dimension with one thread per column, which for 8 experts
  // took 5.6 ms per layer on an H200, over half of a 116 ms step's kernel
  // time (scripts/gpu-moe-profile.sh with CAPACITY=1.25).
  torch::Tensor queued = one_hot.t().contiguous().cumsum(1).t();
  torch::Tensor positions = (queued - 1).mul_(one_hot).sum(1);
  return positions.view({k, tokens}).t();
}

// RTS (top-1): an expert keeps the `capacity` of its tokens with the highest
// random priority.
torch::Tensor KeepAtRandom(const torch::Tensor& experts, int64_t capacity) {
  const int64_t tokens = experts.size(0);
  torch::Tensor priority = CpuUniform({tokens}).to(torch::kDouble).to(experts.device());
  torch::Tensor expert = experts.select(1, 0);
  // Sort by expert, then by descending priority: key 2e + (1 - u) with u in [0,
  // 1).
  torch::Tensor key = expert.to(torch::kDouble) * 2 + (1 - priority);
  torch::Tensor order = std::get<1>(key.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  torch::Tensor sorted_expert = expert.index_select(0, order);
  // Rank within the expert: position in the order minus where the expert
  // starts.
  torch::Tensor starts = torch::searchsorted(sorted_expert, sorted_expert, /*out_int32=*/false, /*right=*/false);
  torch::Tensor rank_sorted = torch::arange(tokens, experts.options()) - starts;
  torch::Tensor rank = torch::empty_like(rank_sorted).index_copy_(0, order, rank_sorted);
  return (rank < capacity).unsqueeze(1);
}

}  // namespace

int64_t ExpertCapacity(int64_t tokens, int64_t experts, int64_t k, double factor, int64_t min_capacity) {
  const double exact = static_cast<double>(k * tokens) / static_cast<double>(experts) * factor;
  return std::max<int64_t>(static_cast<int64_t>(std::ceil(exact - 1e-9)), min_capacity);
}

Routing RouteTokens(const torch::Tensor& logits, const GatingOptions& options, bool training) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == torch::kFloat,
              "router logits must be [tokens, experts] fp32");
  const int64_t tokens = logits.size(0), num_experts = logits.size(1), k = options.top_k;
  TORCH_CHECK(num_experts == options.num_experts && k >= 1 && k <= num_experts, "top_k ", k, " of ", num_experts,
              " experts");
  Routing routing;
  torch::Tensor gates = torch::softmax(logits, 1);

  // The choices.
  if (k == 1) {
    torch::Tensor scores = training && options.noisy_gate_policy == NoisyGatePolicy::kRSample
                               ? logits.detach() + Gumbel(logits)
                               : gates.detach();
    routing.experts = scores.argmax(1, /*keepdim=*/true);
  } else if (k == 2) {
    torch::Tensor first = gates.detach().argmax(1, /*keepdim=*/true);
    // DeepSpeed samples the second expert (Gumbel noise on the logits) in
    // training; evaluation takes the second best, as Mixtral does.
    torch::Tensor second_scores =
        training && options.second_expert_sampling ? logits.detach() + Gumbel(logits) : logits.detach().clone();
    second_scores.scatter_(1, first, -std::numeric_limits<float>::infinity());
    routing.experts = torch::cat({first, second_scores.argmax(1, /*keepdim=*/true)}, 1);
  } else {
    routing.experts = std::get<1>(logits.detach().topk(k, 1));
  }

  // The load-balancing loss, before any drop.
  torch::Tensor me = gates.mean(0);
  torch::Tensor chosen = k <= 2 ? routing.experts.narrow(1, 0, 1) : routing.experts;
  torch::Tensor ce = torch::zeros({num_experts}, gates.options())
                         .index_add_(0, chosen.reshape({-1}), torch::ones({chosen.numel()}, gates.options())) /
                     static_cast<double>(tokens);
  const double scale = k <= 2 ? static_cast<double>(num_experts) : static_cast<double>(num_experts) / k;
  routing.aux_loss = (me * ce).sum() * scale;
  routing.z_loss = torch::logsumexp(logits, 1).square().mean();

  // Capacity and drops.
  if (options.drop_tokens) {
    const double factor = training ? options.capacity_factor : options.eval_capacity_factor;
    routing.capacity = ExpertCapacity(tokens, num_experts, k, factor, options.min_capacity);
    routing.kept = k == 1 && options.use_rts && training
                       ? KeepAtRandom(routing.experts, routing.capacity)
                       : QueuePositions(routing.experts, num_experts) < routing.capacity;
  } else {
    routing.kept = torch::ones_like(routing.experts, torch::kBool);
  }

  // Combine weights: top-1 the gate itself; top-k the kept gates renormalised.
  torch::Tensor weights = gates.gather(1, routing.experts) * routing.kept.to(gates.scalar_type());
  if (k > 1) {
    weights = weights / weights.sum(1, /*keepdim=*/true).clamp_min(std::numeric_limits<float>::epsilon());
  }
  routing.weights = weights;
  routing.counts = torch::zeros({num_experts}, routing.experts.options())
                       .index_add_(0, routing.experts.reshape({-1}), routing.kept.reshape({-1}).to(torch::kLong));
  routing.dropped = 1.0 - routing.kept.to(torch::kFloat).mean();
  return routing;
}

}  // namespace dslaunch::runtime

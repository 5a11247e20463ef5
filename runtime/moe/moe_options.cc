#include "runtime/moe/moe_options.h"

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

const char* NoisyGatePolicyName(NoisyGatePolicy policy) {
  switch (policy) {
    case NoisyGatePolicy::kNone:
      return "None";
    case NoisyGatePolicy::kJitter:
      return "Jitter";
    case NoisyGatePolicy::kRSample:
      return "RSample";
  }
  return "None";
}

bool ParseNoisyGatePolicy(const std::string& text, NoisyGatePolicy* policy) {
  if (text.empty() || text == "None" || text == "none" || text == "null") {
    *policy = NoisyGatePolicy::kNone;
  } else if (text == "Jitter") {
    *policy = NoisyGatePolicy::kJitter;
  } else if (text == "RSample") {
    *policy = NoisyGatePolicy::kRSample;
  } else {
    return false;
  }
  return true;
}

std::string CheckMoeOptions(const MoeOptions& options) {
  const GatingOptions& g = options.gating;
  if (g.num_experts < 1) return absl::StrCat("model.moe.num_experts=", g.num_experts, ": must be at least 1");
  if (g.top_k < 1 || g.top_k > g.num_experts) {
    return absl::StrCat("model.moe.top_k=", g.top_k, ": must be between 1 and num_experts (", g.num_experts, ")");
  }
  if (options.every < 1) return absl::StrCat("model.moe.every=", options.every, ": must be at least 1");
  if (options.expert_row_multiple < 1) {
    return absl::StrCat("model.moe.expert_row_multiple=", options.expert_row_multiple, ": must be at least 1");
  }
  if (g.capacity_factor <= 0 || g.eval_capacity_factor <= 0) {
    return absl::StrCat("model.moe.capacity_factor=", g.capacity_factor,
                        ", eval_capacity_factor=", g.eval_capacity_factor, ": must be positive");
  }
  if (g.min_capacity < 0) return absl::StrCat("model.moe.min_capacity=", g.min_capacity, ": must not be negative");
  if (options.aux_loss_coef < 0 || options.z_loss_coef < 0) {
    return absl::StrCat("model.moe.aux_loss_coef=", options.aux_loss_coef, ", z_loss_coef=", options.z_loss_coef,
                        ": must not be negative");
  }
  const ExpertParallelGroup& group = options.expert_parallel;
  if (group.size < 1 || g.num_experts % group.size != 0) {
    return absl::StrCat("model.moe.num_experts=", g.num_experts, " must be a multiple of the expert-parallel size (",
                        group.size, ")");
  }
  return "";
}

}  // namespace dslaunch::runtime

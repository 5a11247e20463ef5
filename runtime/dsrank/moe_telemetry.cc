#include "runtime/dsrank/moe_telemetry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "runtime/moe/moe_layer.h"

namespace dslaunch::runtime {

absl::StatusOr<std::vector<MoeLayerRouting>> GatherMoeRouting(torch::nn::Module& module,
                                                              const TrainerContext& context) {
  std::vector<std::pair<std::string, const MoeLayerImpl*>> layers;
  for (const auto& item : module.named_modules()) {
    if (const auto* layer = dynamic_cast<const MoeLayerImpl*>(item.value().get()))
      layers.emplace_back(item.key(), layer);
  }
  std::vector<MoeLayerRouting> routings;
  if (layers.empty()) return routings;
  const int64_t experts = layers[0].second->options().gating.num_experts;
  // Per layer: the tokens of each expert, the dropped fraction, the auxiliary
  // loss, and 1 on a rank that ran it (with pipeline stages, only the ranks
  // of its stage do: the means are over those).
  torch::Tensor table = torch::zeros({static_cast<int64_t>(layers.size()), experts + 3},
                                     torch::TensorOptions().dtype(torch::kDouble).device(context.device));
  for (size_t i = 0; i < layers.size(); ++i) {
    const MoeLayerStats& stats = layers[i].second->last_stats();
    if (!stats.tokens_per_expert.defined()) continue;
    table[i].narrow(0, 0, experts).copy_(stats.tokens_per_expert);
    table[i][experts] = stats.dropped.to(table.device());
    table[i][experts + 1] = stats.aux_loss.to(table.device());
    table[i][experts + 2] = 1.0;
  }
  const int ranks = context.world != nullptr ? context.world->size() : 1;
  if (ranks > 1) DS_RETURN_IF_ERROR(context.world->AllReduce(table, ReduceOp::kSum));
  table = table.cpu();
  for (size_t i = 0; i < layers.size(); ++i) {
    MoeLayerRouting& routing = routings.emplace_back();
    routing.layer = layers[i].first;
    for (int64_t e = 0; e < experts; ++e) {
      routing.tokens_per_expert.push_back(static_cast<int64_t>(table[i][e].item<double>()));
    }
    const double holders = std::max(1.0, table[i][experts + 2].item<double>());
    routing.dropped_fraction = table[i][experts].item<double>() / holders;
    routing.aux_loss = table[i][experts + 1].item<double>() / holders;
  }
  return routings;
}

std::string MoeRoutingLine(const MoeLayerRouting& routing) {
  return absl::StrFormat("moe %s: tokens per expert [%s] dropped %.2f%% aux_loss %.4f", routing.layer,
                         absl::StrJoin(routing.tokens_per_expert, " "), 100.0 * routing.dropped_fraction,
                         routing.aux_loss);
}

std::vector<MonitorEvent> MoeRoutingEvents(const std::vector<MoeLayerRouting>& layers, int64_t samples) {
  std::vector<MonitorEvent> events;
  for (const MoeLayerRouting& routing : layers) {
    const std::string prefix = absl::StrCat("MoE/", routing.layer, "/");
    events.push_back({prefix + "dropped_fraction", routing.dropped_fraction, samples});
    events.push_back({prefix + "aux_loss", routing.aux_loss, samples});
    for (size_t e = 0; e < routing.tokens_per_expert.size(); ++e) {
      events.push_back({absl::StrCat(prefix, "tokens_expert_", e), static_cast<double>(routing.tokens_per_expert[e]),
                        samples});
    }
  }
  return events;
}

}  // namespace dslaunch::runtime

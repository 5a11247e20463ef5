// model.moe.telemetry for dsrank's step line and the monitors (Note
// [Mixture of experts], runtime/moe/moe_options.h; Note [Monitor metrics]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/dsrank/gpt_trainer.h"
#include "runtime/monitor/monitor_event.h"

namespace dslaunch::runtime {

// One expert layer's routing of the last micro-batch, over the world.
struct MoeLayerRouting {
  std::string layer;                       // the module's name, "blocks.1.moe"
  std::vector<int64_t> tokens_per_expert;  // summed over the ranks
  double dropped_fraction = 0;             // of (token, choice) pairs, the ranks' mean
  double aux_loss = 0;                     // the ranks' mean
};

// Every expert layer of `module`. A collective: every rank calls it.
absl::StatusOr<std::vector<MoeLayerRouting>> GatherMoeRouting(torch::nn::Module& module,
                                                              const TrainerContext& context);

// "moe blocks.1.moe: tokens per expert [12 3 9 8] dropped 1.56% aux_loss 1.0123"
std::string MoeRoutingLine(const MoeLayerRouting& routing);

// The monitors' scalars at x = `samples`: MoE/<layer>/dropped_fraction,
// MoE/<layer>/aux_loss and MoE/<layer>/tokens_expert_<e> for each expert.
std::vector<MonitorEvent> MoeRoutingEvents(const std::vector<MoeLayerRouting>& layers, int64_t samples);

}  // namespace dslaunch::runtime

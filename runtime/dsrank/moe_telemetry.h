// model.moe.telemetry for dsrank's step line (Note [Mixture of experts],
// runtime/moe/moe_options.h).
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/dsrank/gpt_trainer.h"

namespace dslaunch::runtime {

// One line per expert layer of `module` with the routing of the last
// micro-batch summed over the world: tokens per expert, the dropped share of
// (token, choice) pairs and the mean auxiliary loss. A collective: every
// rank calls it.
absl::StatusOr<std::vector<std::string>> MoeTelemetryLines(torch::nn::Module& module, const TrainerContext& context);

}  // namespace dslaunch::runtime

// What a dsrank rank reports of each finished step with its heartbeats
// (RankMetrics, proto/agent.proto): the figures `dslaunch status` and the
// controller's /metrics show (Note [Live job status],
// launcher/job_status_board.h).
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "proto/agent.pb.h"

namespace dslaunch::runtime {

// `step_seconds`: the step's wall time (0: rates not reported). On a GPU,
// the rank's peak allocated memory too.
RankMetrics StepMetrics(int64_t total_steps, double loss, double learning_rate, double step_seconds,
                        double tokens_per_step, int64_t samples_per_step, const torch::Device& device);

}  // namespace dslaunch::runtime

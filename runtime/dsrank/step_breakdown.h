// The breakdowns dsrank prints under a step line (ds_config's
// wall_clock_breakdown and memory_breakdown): where the window's wall clock
// went (the offload's and each pipeline stage's share too), and what the
// engine holds where.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <torch/torch.h>

#include "runtime/engine/engine.h"
#include "runtime/pipeline/pipeline_engine.h"

namespace dslaunch::runtime {

// The wall clock of the steps since the last printed line.
struct WallClockWindow {
  int64_t steps = 0;
  double seconds = 0;            // the whole window
  double forward_backward = 0;   // the engine's forward and backward
  double step = 0;               // all-reduce and optimizer
  double overlapped = 0;         // the preemption check and the next batch, while the GPU works
};

// wall_clock_breakdown: the window's parts; the offload's times since the
// start (Note [Offload breakdown]), the delayed update's wait; with a
// pipeline, each stage's [forward, backward, transfers, schedule] seconds
// (`stage_seconds`, gathered over the stages) and its bubble against the
// pipeline's step (Note [Measured bubble]).
void PrintWallClockBreakdown(std::FILE* out, const WallClockWindow& window, const Engine& engine, bool delay_update,
                             const PipelineEngine* pipe, const std::vector<std::array<double, 4>>& stage_seconds);

// memory_breakdown: parameters, gradients, master weights, optimizer state
// and frozen parameters, where each lives (host, NVMe), the device's peak,
// ZeRO-3's largest gathering.
void PrintMemoryBreakdown(std::FILE* out, const Engine& engine, const torch::Device& device, int zero_stage);

}  // namespace dslaunch::runtime

// The end of dsrank's step line: where the run is and what it runs with.
//
//   step=40 loss=2.1000 lr=1.000e-03 loss_scale=1 tokens/s=5120 | 40/200 (20%) elapsed 0:12 eta 0:48 | ZeRO-2, optimizer offloaded to cpu
//
// Plain C++ (no LibTorch), so its test builds without the trainer.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/config/job_config.h"

namespace dslaunch::runtime {

// "ZeRO-2", "ZeRO-3, optimizer offloaded to cpu, parameters offloaded to
// cpu", "no ZeRO" (stage 0).
std::string OptimizerInUse(const DsConfig& ds);

// "40/200 (20%) elapsed 0:12 eta 0:48 | <optimizer>": `step` of `total`
// steps, `elapsed_seconds` since `first_step` of this attempt began (a
// resumed run measures its rate from where it resumed). The ETA is
// "unknown" until a step has finished.
std::string ProgressText(int64_t step, int64_t first_step, int64_t total, double elapsed_seconds,
                         const std::string& optimizer);

// 75 → "1:15", 3725 → "1:02:05".
std::string ClockText(double seconds);

}  // namespace dslaunch::runtime

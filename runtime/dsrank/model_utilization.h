// What dsrank's step line and monitors need for TFLOP/s per GPU and MFU
// (Note [Model FLOPs], runtime/estimate/model_flops.h).
#pragma once

#include "runtime/config/job_config.h"
#include "runtime/dsrank/gpt_trainer.h"

namespace dslaunch::runtime {

struct ModelUtilization {
  double flops_per_token = 0;  // 0: not reported (the CPU, or a model the sizer refuses)
  double peak_flops = 0;       // the GPU's dense bf16/fp16 peak; 0: no MFU
};

// On a GPU, the model's FLOPs per token and the GPU's peak from the table;
// rank 0 says at start what it will report and, when not, why. Zeros on the CPU.
ModelUtilization ModelUtilizationOf(const JobConfig& job, const TrainerContext& context);

}  // namespace dslaunch::runtime

// The text `dslaunch estimate` prints (Note [Memory estimate]).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/estimate/memory_estimate.h"

namespace dslaunch::runtime {

struct EstimateRequest {
  ModelSize model;
  int gpus_per_node = 1;
  int nodes = 1;
  int compute_bytes = 2;           // 2: bf16/fp16, 4: fp32
  std::string precision = "bf16";  // as printed
  int64_t micro_batch = 1;
  double gpu_memory_gib = 0;       // > 0: the largest micro batch that fits each setting
  bool attention_scores_kept = false;
  bool delay_update = false;
  double additional_buffer_factor = 1.5;  // DeepSpeed's, for its rows
};

std::string EstimateReport(const EstimateRequest& request);

}  // namespace dslaunch::runtime

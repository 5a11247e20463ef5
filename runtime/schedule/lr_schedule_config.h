// The learning-rate schedule's settings: ds_config's "scheduler" section.
// Here, beside the schedules, so that runtime/schedule needs nothing from
// runtime/config (config includes this to parse the section).
#pragma once

#include <cstdint>
#include <string>

namespace dslaunch::runtime {

// DeepSpeed's scheduler parameters (deepspeed/runtime/lr_schedules.py), all
// in one struct; `type` says which apply. Empty type: constant lr.
struct SchedulerConfig {
  std::string type;  // "", LRRangeTest, OneCycle, WarmupLR, WarmupDecayLR, WarmupCosineLR
  // LRRangeTest
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
  // OneCycle
  double cycle_min_lr = 0;
  double cycle_max_lr = 0;
  double decay_lr_rate = 0;
  int64_t cycle_first_step_size = 2000;
  int64_t cycle_second_step_size = -1;  // -1: same as first
  int64_t cycle_first_stair_count = 0;
  int64_t cycle_second_stair_count = -1;  // -1: same as first
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0;
  // WarmupLR / WarmupDecayLR
  double warmup_min_lr = 0;
  double warmup_max_lr = 1e-3;
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // log | linear
  int64_t total_num_steps = 0;      // WarmupDecayLR, WarmupCosineLR
  // WarmupCosineLR (ratios of the optimizer's lr)
  double warmup_min_ratio = 0;
  double cos_min_ratio = 1e-4;
};

}  // namespace dslaunch::runtime

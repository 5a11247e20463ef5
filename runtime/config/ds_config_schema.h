// The ds_config key table (DeepSpeed 0.19 names and defaults) and the checks
// that span several keys. Internal to runtime/config.
#pragma once

#include <string>
#include <vector>

#include "runtime/config/config_schema.h"
#include "runtime/config/job_config.h"

namespace dslaunch::runtime::config_internal {

// DeepSpeed's built-in LR schedules (deepspeed/runtime/lr_schedules.py).
const std::vector<std::string>& SchedulerTypes();
// Optimizer names DeepSpeed accepts in `optimizer.type` (case-insensitive):
// its own plus the torch.optim classes users commonly name.
const std::vector<std::string>& OptimizerTypes();

// Every ds_config key, bound to `config`'s fields, in DeepSpeed's documented
// order. Scheduler parameters are those of `scheduler_type`, or of all five
// schedulers when it is empty or unknown.
std::vector<KeySpec> DsConfigKeys(DsConfig* config, const std::string& scheduler_type);

// Sections whose keys are accepted unchecked in every configuration (amp's
// options go to amp.initialize(); ZeRO++'s LoCo parameters; the blocks of
// OpenSectionsOfFeaturesNotBuilt()).
std::vector<std::string> DsConfigOpenSections();

// Checks a ds_config tree and writes it into `config`. The optimizer's and the
// scheduler's `type` decide which `params` keys are valid.
WalkResult WalkDsConfig(const YAML::Node& root, const TreeSource& source, DsConfig* config,
                        Problems* problems);

// After the walk, before "auto" is resolved: settings that follow from others
// (overlap_comm, adam_w_mode, autotp_size) and checks across keys.
void FinishDsConfig(const WalkResult& walk, const TreeSource& source, DsConfig* config,
                    Problems* problems);

// After "auto" is resolved: checks that need the final values (fp16 and bf16).
void CheckResolvedDsConfig(const WalkResult& walk, const TreeSource& source, const DsConfig& config,
                           Problems* problems);

// Features configured that the runtime does not build yet, one line each
// (JobConfig::not_yet_supported).
std::vector<std::string> NotYetSupported(const WalkResult& walk, const DsConfig& config);

// Note [Keys without effect here] (config_schema.h): the keys given with a
// value other than DeepSpeed's default that only tune DeepSpeed's speed or
// memory, or have an equivalent here; each line names the key, its value and
// why it has no effect. Warnings: the job runs.
std::vector<std::string> WithoutEffectHere(const WalkResult& walk, const DsConfig& config);

}  // namespace dslaunch::runtime::config_internal

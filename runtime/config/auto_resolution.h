// Note ["auto"] and the batch triad: what fills the ds_config values that the
// user left to dslaunch. Internal to runtime/config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/config/config_schema.h"
#include "runtime/config/job_config.h"

namespace dslaunch::runtime::config_internal {

// What "auto" resolves from when the ds_config belongs to a job file.
struct JobAutoSources {
  const TrainConfig* train = nullptr;
  const WalkResult* train_walk = nullptr;  // which train.* keys the job file sets
  int model_width = 0;                     // 0: unknown, bucket sizes stay unresolved
};

// Fills every "auto" in `config` except the three batch sizes (see
// ResolveBatchSizes). Without `job` (a bare ds_config) only what needs no job
// file resolves; every other "auto" is a problem naming what it would take.
void ResolveAuto(const WalkResult& walk, const TreeSource& source, const JobAutoSources* job,
                 DsConfig* config, Problems* problems);

// The Hugging Face Trainer's rule: a ds_config value written out (not "auto")
// must agree with the job file's value for the same thing when the job file
// sets it too, or one of them would be silently ignored.
void CheckAgreesWithJob(const WalkResult& walk, const TreeSource& source, const JobAutoSources& job,
                        const DsConfig& config, Problems* problems);

// The batch sizes as given; nullopt: not given (absent, null, or "auto" with
// nothing to fill it).
struct GivenBatchSizes {
  std::optional<int64_t> train_batch_size;
  std::optional<int64_t> micro_batch_size;  // train_micro_batch_size_per_gpu
  std::optional<int64_t> gradient_accumulation_steps;
};

// Reads the three batch keys after the walk; nullopt overall when one of them
// was refused already (its problem is reported; the triad would only repeat it).
std::optional<GivenBatchSizes> BatchSizesFromWalk(const WalkResult& walk, const DsConfig& config,
                                                  const JobAutoSources* job);

// DeepSpeed's _set_batch_related_parameters, with exact division: with a
// data-parallel size dp = world_size / (tp_size * pipeline stages),
// train_batch_size = micro * accumulation * dp. Two given decide the third;
// train_batch_size alone gives accumulation 1; micro alone gives accumulation
// 1. Writes the three into `config`; returns the problems (key names carry
// `key_prefix`), empty when they agree.
std::vector<std::string> ResolveBatchSizes(const GivenBatchSizes& given, int world_size,
                                           const std::string& key_prefix, DsConfig* config);

}  // namespace dslaunch::runtime::config_internal

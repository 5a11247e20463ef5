// The job file (train.cfg) key table and its checks across keys. Internal to
// runtime/config; the ds_config under `ds_config:` has its own table
// (ds_config_schema.h).
#pragma once

#include <string>
#include <vector>

#include "runtime/config/config_schema.h"
#include "runtime/config/job_config.h"

namespace dslaunch::runtime::config_internal {

// Every job-file key bound to `job`'s fields; `ds_config` is listed as a key of
// any value and loaded by the caller.
std::vector<KeySpec> JobConfigKeys(JobConfig* job);

WalkResult WalkJobConfig(const YAML::Node& root, const TreeSource& source, JobConfig* job,
                         Problems* problems);

// After the walk: required keys, model sanity (width divisible by heads),
// data sources, and relative paths made relative to `job_dir` (the job file's
// folder; "" leaves them as they are).
void FinishJobConfig(const WalkResult& walk, const TreeSource& source, const std::string& job_dir,
                     JobConfig* job, Problems* problems);

// The parameters of the GPT that `model` describes (`vocabulary` symbols):
// token and position embeddings, 12·width² + 13·width per block, the final
// norm. A double, since the bounds of config_limits.h let it pass int64.
double EstimateGptParameters(const ModelConfig& model, int64_t vocabulary);

// After batch resolution: the model's parameter estimate against
// kMaxModelParameters and one micro-batch's tokens against
// kMaxTokensPerMicroBatch. `ds_walk`/`ds_source` locate the ds_config's
// micro-batch when the job file does not set train.micro_batch_size.
void CheckJobScale(const WalkResult& walk, const TreeSource& source, const WalkResult& ds_walk,
                   const TreeSource& ds_source, const JobConfig& job, Problems* problems);
// Pipeline parallelism against the rest of the job (Note [Pipeline stages]):
// the schedule's rules, the layer count, and what a pipelined run cannot do
// yet, each at its key, before anything starts.
void CheckPipeline(const WalkResult& walk, const TreeSource& source, const WalkResult& ds_walk,
                   const TreeSource& ds_source, const JobConfig& job, Problems* problems);

// LoRA under tensor parallelism: an adapter on the vocabulary-split output
// head is refused at lora.target_modules.
void CheckLoraWithTensorParallelism(const WalkResult& walk, const TreeSource& source, const JobConfig& job,
                                    Problems* problems);

// Mixture of experts (model.moe) against the ds_config's moe block and the
// rest of the job (Note [Mixture of experts]): each conflict at its key.
void CheckMoe(const WalkResult& walk, const TreeSource& source, const WalkResult& ds_walk, const TreeSource& ds_source,
              const JobConfig& job, Problems* problems);

// `path` relative to `dir` when it is relative, else unchanged.
std::string ResolveRelativePath(const std::string& dir, const std::string& path);

}  // namespace dslaunch::runtime::config_internal

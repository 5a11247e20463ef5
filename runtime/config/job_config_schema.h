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

// `path` relative to `dir` when it is relative, else unchanged.
std::string ResolveRelativePath(const std::string& dir, const std::string& path);

}  // namespace dslaunch::runtime::config_internal

// Loading and resolving job files and ds_configs (Note [Config strictness],
// Note ["auto"] in job_config.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/config/job_config.h"

namespace dslaunch::runtime {

// One `--override key.path=value`. Paths address the train.cfg
// (`train.steps=5`, `model.layers=2`) or the ds_config through it
// (`ds_config.zero_optimization.stage=1`). For a bare ds_config file, paths are
// ds_config keys (`gradient_clipping=1.0`). The value is parsed as YAML.
struct ConfigOverride {
  std::string path;
  std::string value;
};

// Parses "key.path=value"; the error names the text.
absl::StatusOr<ConfigOverride> ParseOverride(const std::string& text);

// Reads a train.cfg (YAML) with its ds_config (inline under `ds_config:` or a
// path to a JSON/YAML file, relative to the train.cfg), applies overrides,
// validates everything, resolves "auto" for `world`. Every problem is reported
// in one InvalidArgument status, one problem per line, each naming file, key
// path, value and (for unknown keys) the nearest valid key.
absl::StatusOr<JobConfig> LoadJobConfig(const std::string& path,
                                        const std::vector<ConfigOverride>& overrides,
                                        const WorldShape& world);

// Note [Elastic batch]: an elastic job's world size is not the user's choice.
// Like LoadJobConfig, but when the job's global batch is not a multiple of
// micro-batch x data-parallel size at this world, the nearest multiple is
// used instead and `note` says so in one line. Any other problem (or a job
// without train.global_batch_size) is reported as LoadJobConfig does.
absl::StatusOr<JobConfig> LoadElasticJobConfig(const std::string& path,
                                               const std::vector<ConfigOverride>& overrides,
                                               const WorldShape& world, std::string* note);

// A bare ds_config.json/yaml, for `dslaunch --validate ds_config.json`.
// "auto" values that need a job file are reported as unresolvable only when
// nothing else can fill them (batch sizes need two of the three numbers).
// `not_yet_supported` and `without_effect`, when given, receive the lines
// JobConfig::not_yet_supported and JobConfig::without_effect would hold.
absl::StatusOr<DsConfig> LoadDsConfig(const std::string& path,
                                      const std::vector<ConfigOverride>& overrides,
                                      const WorldShape& world,
                                      std::vector<std::string>* not_yet_supported = nullptr,
                                      std::vector<std::string>* without_effect = nullptr);

// The resolved config as YAML (printed once at start and by --validate).
std::string DescribeJobConfig(const JobConfig& config);
std::string DescribeDsConfig(const DsConfig& config);

}  // namespace dslaunch::runtime

#include "runtime/config/config_loader.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/bounded_file.h"
#include "runtime/config/auto_resolution.h"
#include "runtime/config/config_document.h"
#include "runtime/config/config_schema.h"
#include "runtime/config/ds_config_schema.h"
#include "runtime/config/job_config_schema.h"
#include "runtime/fs/path.h"  // not std::filesystem (fs/file_system.h says why)
#include "yaml-cpp/yaml.h"

namespace dslaunch::runtime {
namespace {

using config_internal::AppliedOverride;
using config_internal::JobAutoSources;
using config_internal::Problems;
using config_internal::TreeSource;
using config_internal::WalkResult;

constexpr absl::string_view kDsConfigKey = "ds_config";

std::string OverrideText(const ConfigOverride& o) { return absl::StrCat(o.path, "=", o.value); }

// The file as one YAML document (JSON is YAML's flow syntax); `what` names
// its role in messages. NotFound when it does not exist; InvalidArgument when
// it is no regular file, too large (Note [Bounded input files]) or not one
// well-formed document (Note [One config document]), with line and column.
absl::StatusOr<YAML::Node> ReadYamlFile(const std::string& path, absl::string_view what) {
  absl::StatusOr<std::string> text = ReadConfigFile(path, what);
  if (!text.ok()) return text.status();
  return ParseConfigDocument(*text, path, ConfigSyntaxOf(path));
}

// Writes each override into the tree, creating sections on the way, and
// records it in `source` so that problems with its value name it. Paths are
// relative to `root`; `path_prefix` restores the path the user wrote
// ("ds_config.") in messages.
void ApplyOverrides(const std::vector<ConfigOverride>& overrides, const std::string& path_prefix,
                    YAML::Node* root, TreeSource* source, Problems* problems) {
  for (const ConfigOverride& o : overrides) {
    const std::string text = absl::StrCat(path_prefix, OverrideText(o));
    absl::StatusOr<YAML::Node> parsed =
        ParseConfigDocument(o.value, absl::StrCat("--override '", text, "'"), ConfigSyntax::kYaml);
    if (!parsed.ok()) {
      problems->Add(std::string(parsed.status().message()));
      continue;
    }
    YAML::Node value = *parsed;
    if (!root->IsMap()) {
      if (root->IsDefined() && !root->IsNull()) continue;  // the walk reports the file's top level
      *root = YAML::Node(YAML::NodeType::Map);
    }
    std::vector<std::string> parts = absl::StrSplit(o.path, '.');
    YAML::Node cursor;
    cursor.reset(*root);  // reset() rebinds; operator= would overwrite the node itself
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      YAML::Node child = cursor[parts[i]];
      if (!child.IsMap()) {
        cursor[parts[i]] = YAML::Node(YAML::NodeType::Map);
        child.reset(cursor[parts[i]]);
      }
      cursor.reset(child);
    }
    cursor[parts.back()] = value;
    source->overrides.push_back(AppliedOverride{o.path, text});
  }
}

// Reports the batch triad's problems at the first batch key given (or the file).
void ResolveBatchSizesOrReport(const WalkResult& walk, const TreeSource& source,
                               const JobAutoSources* job, const WorldShape& world, DsConfig* config,
                               Problems* problems) {
  std::optional<config_internal::GivenBatchSizes> given =
      config_internal::BatchSizesFromWalk(walk, *config, job);
  if (!given) return;
  std::string anchor;
  for (const char* key :
       {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}) {
    if (anchor.empty() && walk.Has(key)) anchor = key;
  }
  std::string location =
      anchor.empty()
          ? source.file
          : config_internal::Location(source, walk.WrittenPath(anchor), walk.MarkOf(anchor));
  for (const std::string& problem :
       config_internal::ResolveBatchSizes(*given, world.world_size, source.key_prefix, config)) {
    problems->At(location, problem);
  }
}

}  // namespace

absl::StatusOr<ConfigOverride> ParseOverride(const std::string& text) {
  size_t equals = text.find('=');
  if (equals == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--override '", text, "': expected key.path=value"));
  }
  ConfigOverride result;
  result.path = std::string(absl::StripAsciiWhitespace(text.substr(0, equals)));
  result.value = text.substr(equals + 1);
  for (absl::string_view part : absl::StrSplit(result.path, '.')) {
    if (part.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--override '", text, "': the key path '",
                                                     result.path, "' has an empty part"));
    }
  }
  absl::StatusOr<YAML::Node> value =
      ParseConfigDocument(result.value, absl::StrCat("--override '", text, "'"), ConfigSyntax::kYaml);
  if (!value.ok()) return value.status();
  return result;
}

absl::StatusOr<DsConfig> LoadDsConfig(const std::string& path,
                                      const std::vector<ConfigOverride>& overrides,
                                      const WorldShape& world,
                                      std::vector<std::string>* not_yet_supported,
                                      std::vector<std::string>* without_effect) {
  absl::StatusOr<YAML::Node> root = ReadYamlFile(path, "ds_config file");
  if (!root.ok()) return root.status();
  Problems problems;
  TreeSource source{path, "", {}};
  ApplyOverrides(overrides, "", &*root, &source, &problems);

  DsConfig config;
  WalkResult walk = config_internal::WalkDsConfig(*root, source, &config, &problems);
  if (walk.invalid.count("")) return problems.ToStatus();
  config_internal::FinishDsConfig(walk, source, &config, &problems);
  config_internal::ResolveAuto(walk, source, /*job=*/nullptr, &config, &problems);
  ResolveBatchSizesOrReport(walk, source, /*job=*/nullptr, world, &config, &problems);
  config_internal::CheckResolvedDsConfig(walk, source, config, &problems);
  if (!problems.empty()) return problems.ToStatus();
  if (not_yet_supported != nullptr) {
    *not_yet_supported = config_internal::NotYetSupported(walk, config);
  }
  if (without_effect != nullptr) *without_effect = config_internal::WithoutEffectHere(walk, config);
  return config;
}

absl::StatusOr<JobConfig> LoadJobConfig(const std::string& path,
                                        const std::vector<ConfigOverride>& overrides,
                                        const WorldShape& world) {
  absl::StatusOr<YAML::Node> root = ReadYamlFile(path, "job file");
  if (!root.ok()) return root.status();
  const std::string job_dir = path.find('/') == std::string::npos ? std::string() : ParentDirectory(path);
  Problems problems;
  JobConfig job;
  job.path = path;

  // `ds_config.*` overrides go to the ds_config wherever it lives (inline or
  // its own file); the rest, `ds_config=other.json` included, to the job file.
  std::vector<ConfigOverride> job_overrides, ds_overrides;
  const std::string ds_prefix = absl::StrCat(kDsConfigKey, ".");
  for (const ConfigOverride& o : overrides) {
    if (absl::StartsWith(o.path, ds_prefix)) {
      ds_overrides.push_back(o);
      ds_overrides.back().path = o.path.substr(ds_prefix.size());
    } else {
      job_overrides.push_back(o);
    }
  }
  TreeSource job_source{path, "", {}};
  ApplyOverrides(job_overrides, "", &*root, &job_source, &problems);
  WalkResult job_walk = config_internal::WalkJobConfig(*root, job_source, &job, &problems);
  if (job_walk.invalid.count("")) return problems.ToStatus();
  config_internal::FinishJobConfig(job_walk, job_source, job_dir, &job, &problems);

  // The ds_config: inline (a mapping) or the path of a JSON/YAML file.
  std::optional<YAML::Node> ds_root;
  TreeSource ds_source{path, ds_prefix, {}};
  const std::string ds_key(kDsConfigKey);
  if (!job_walk.Has(ds_key)) {
    if (ds_overrides.empty()) {
      problems.At(path, "ds_config: required (a mapping, or the path of a JSON/YAML file)");
    } else {
      ds_root = YAML::Node(YAML::NodeType::Map);
    }
  } else {
    const YAML::Node& node = job_walk.given.at(ds_key).node;
    if (node.IsMap() || node.IsNull()) {
      ds_root.emplace();
      ds_root->reset(node);
    } else if (node.IsScalar()) {
      job.ds_config_path = config_internal::ResolveRelativePath(job_dir, node.Scalar());
      absl::StatusOr<std::string> text = ReadConfigFile(job.ds_config_path, "ds_config file");
      absl::StatusOr<YAML::Node> file =
          text.ok() ? ParseConfigDocument(*text, job.ds_config_path, ConfigSyntaxOf(job.ds_config_path))
                    : absl::StatusOr<YAML::Node>(text.status());
      if (file.ok()) {
        ds_root = *file;
        ds_source = TreeSource{job.ds_config_path, "", {}};
      } else if (!text.ok()) {  // missing, not a regular file, too large: where the job file names it
        problems.AtKey(job_source, job_walk.WrittenPath(ds_key), job_walk.MarkOf(ds_key),
                       file.status().message());
      } else {
        problems.Add(std::string(file.status().message()));  // names the ds_config file and line
      }
    } else {
      problems.AtKey(job_source, ds_key, job_walk.MarkOf(ds_key),
                     absl::StrCat("expected a mapping or the path of a JSON/YAML file, got ",
                                  config_internal::DescribeValue(node)));
    }
  }
  if (!ds_root) return problems.ToStatus();

  ApplyOverrides(ds_overrides, ds_prefix, &*ds_root, &ds_source, &problems);
  WalkResult ds_walk = config_internal::WalkDsConfig(*ds_root, ds_source, &job.ds, &problems);
  if (ds_walk.invalid.count("")) return problems.ToStatus();
  config_internal::FinishDsConfig(ds_walk, ds_source, &job.ds, &problems);

  // No optimizer section: the job file's train section decides (AdamW).
  if (!job.ds.optimizer.present) {
    OptimizerConfig& o = job.ds.optimizer;
    o.type = "AdamW";
    o.lr = job.train.lr;
    o.betas = job.train.betas;
    o.eps = job.train.eps;
    o.weight_decay = job.train.weight_decay;
    o.adam_w_mode = true;
  }

  const bool width_usable = job_walk.HasValue("model.width") && job.model.width > 0;
  JobAutoSources sources{&job.train, &job_walk, width_usable ? job.model.width : 0};
  config_internal::ResolveAuto(ds_walk, ds_source, &sources, &job.ds, &problems);
  config_internal::CheckAgreesWithJob(ds_walk, ds_source, sources, job.ds, &problems);
  ResolveBatchSizesOrReport(ds_walk, ds_source, &sources, world, &job.ds, &problems);
  config_internal::CheckResolvedDsConfig(ds_walk, ds_source, job.ds, &problems);
  config_internal::CheckJobScale(job_walk, job_source, ds_walk, ds_source, job, &problems);
  config_internal::CheckPipeline(job_walk, job_source, ds_walk, ds_source, job, &problems);
  config_internal::CheckMoe(job_walk, job_source, ds_walk, ds_source, job, &problems);
  config_internal::CheckLoraWithTensorParallelism(job_walk, job_source, job, &problems);
  if (!problems.empty()) return problems.ToStatus();
  job.not_yet_supported = config_internal::NotYetSupported(ds_walk, job.ds);
  job.without_effect = config_internal::WithoutEffectHere(ds_walk, job.ds);
  return job;
}

absl::StatusOr<JobConfig> LoadElasticJobConfig(const std::string& path,
                                               const std::vector<ConfigOverride>& overrides,
                                               const WorldShape& world, std::string* note) {
  auto job = LoadJobConfig(path, overrides, world);
  if (job.ok()) return job;
  // At one rank the batch always fits (when global % micro == 0): what fails
  // there is wrong whatever the world size, and is what to report.
  auto at_one = LoadJobConfig(path, overrides, WorldShape{1});
  if (!at_one.ok()) return at_one.status();
  const int64_t global = at_one->train.global_batch_size;
  const int64_t micro = at_one->ds.train_micro_batch_size_per_gpu;
  const int64_t dp = world.world_size / std::max<int64_t>(1, at_one->ds.tensor_parallel.tp_size *
                                                                 std::max<int64_t>(1, at_one->ds.pipeline.stages));
  if (global <= 0 || micro <= 0 || dp <= 0) return job.status();
  const int64_t unit = micro * dp;
  const int64_t adjusted = std::max<int64_t>(1, (global + unit / 2) / unit) * unit;
  std::vector<ConfigOverride> with_batch = overrides;
  with_batch.push_back({"train.global_batch_size", absl::StrCat(adjusted)});
  auto retried = LoadJobConfig(path, with_batch, world);
  if (!retried.ok()) return retried.status();
  *note = absl::StrCat("the global batch of ", global, " cannot be kept on ", dp, " data-parallel rank(s) with micro-batch ",
                       micro, "; using ", adjusted, " (gradient accumulation ",
                       retried->ds.gradient_accumulation_steps, ")");
  return retried;
}

}  // namespace dslaunch::runtime

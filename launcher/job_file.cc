#include "launcher/job_file.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "launcher/launcher_notice.h"
#include "launcher/sibling_binary.h"
#include "common/status_macros.h"
#include "runtime/config/config_loader.h"
#include "runtime/config/pipeline_chunks.h"
#include "runtime/config/dsrank_arguments.h"
#include "runtime/estimate/model_size.h"
#include "runtime/offload/nvme_path_check.h"
#include "runtime/pipeline/pipeline_partition.h"

namespace dslaunch {
namespace {

std::vector<std::string> PipelinePartitionLines(const runtime::JobConfig& job);

absl::StatusOr<std::vector<runtime::ConfigOverride>> ParseOverrides(const std::vector<std::string>& texts) {
  std::vector<runtime::ConfigOverride> overrides;
  for (const std::string& text : texts) {
    auto parsed = runtime::ParseOverride(text);
    if (!parsed.ok()) return parsed.status();
    overrides.push_back(*parsed);
  }
  return overrides;
}

// dsrank beside dslaunch (build tree, install prefix), else from PATH.
std::string DsrankBinary() { return BinaryBesideThisOne("dsrank"); }

// Every override of the job: dslaunch's --override, then dsrank's own after the job file.
absl::StatusOr<std::vector<runtime::ConfigOverride>> JobFileOverrides(const LauncherOptions& options) {
  auto rank_arguments = runtime::ParseDsrankArguments(options.program);
  if (!rank_arguments.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(options.program[0], ": ", rank_arguments.status().message()));
  }
  std::vector<std::string> texts = options.overrides;
  texts.insert(texts.end(), rank_arguments->overrides.begin(), rank_arguments->overrides.end());
  return ParseOverrides(texts);
}

// Note [Tensor parallelism] (runtime/tensor_parallel): a tensor group is
// tp_size adjacent ranks, which must sit on one host (NVLink, not the
// network), so tp_size must divide every host's slots.
absl::Status CheckTensorGroupsFitHosts(const runtime::JobConfig& job, const LaunchPlan& plan) {
  const int tp = job.ds.tensor_parallel.tp_size;
  if (tp <= 1) return absl::OkStatus();
  for (const HostSlots& node : plan.nodes) {
    const int slots = static_cast<int>(node.slots.size());
    if (slots % tp != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor_parallel.tp_size=", tp, " does not divide the ", slots, " slot(s) used on host ", node.host,
          ": a tensor-parallel group must sit on one host (adjacent local ranks); use a tp_size that divides every "
          "host's slots, or --num_gpus a multiple of it"));
    }
  }
  return absl::OkStatus();
}

// LibTorch's CPU kernels do not cover fp16 training (1.13 has no fp16
// LayerNorm; matrix products are emulated), and dynamic loss scaling exists
// for GPUs: refused before a rank starts rather than deep inside the first
// forward.
absl::Status CheckPrecisionOnCpu(const runtime::DsConfig& ds, bool ranks_on_cpu) {
  if (!ranks_on_cpu || !ds.fp16.enabled) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "fp16.enabled=true (train.precision=fp16) needs GPUs, and this job's ranks would run on the CPU (this "
      "machine has none and no hostfile names others): LibTorch's CPU kernels do not train in fp16. Use "
      "train.precision=bf16 or fp32 on the CPU");
}

// Note [NVMe offload]: a local job's nvme_path is this machine's, checked
// here before any rank starts (missing, not writable, on tmpfs); each rank
// checks its own host's folder again at start, with the bytes its swap files
// need.
absl::Status CheckLocalNvmePath(const runtime::JobConfig& job, bool local) {
  if (!local) return absl::OkStatus();
  // Note [Parameters on NVMe]: the parameters' folder is checked the same way.
  for (const auto& [section, offload] :
       {std::pair<const char*, const runtime::OffloadConfig*>{"offload_optimizer",
                                                              &job.ds.zero_optimization.offload_optimizer},
        std::pair<const char*, const runtime::OffloadConfig*>{"offload_param", &job.ds.zero_optimization.offload_param}}) {
    if (offload->device != "nvme") continue;
    DS_RETURN_IF_ERROR(runtime::CheckNvmePath(absl::StrCat("zero_optimization.", section, ".nvme_path"),
                                              offload->nvme_path, 0));
  }
  return absl::OkStatus();
}

absl::Status CheckJobFile(const LauncherOptions& options, const std::string& job_file, JobSpec* spec,
                          bool ranks_on_cpu, bool local) {
  const LaunchPlan& plan = spec->plan;
  const int world_size = plan.world_size();
  auto overrides = JobFileOverrides(options);
  if (!overrides.ok()) return overrides.status();
  // Note [Elastic batch]: an elastic job may adjust a global batch this
  // world size cannot keep (dsrank states it); others must fit as written.
  std::string batch_note;
  auto job = options.min_nodes > 0
                 ? runtime::LoadElasticJobConfig(job_file, *overrides, runtime::WorldShape{world_size}, &batch_note)
                 : runtime::LoadJobConfig(job_file, *overrides, runtime::WorldShape{world_size});
  if (!job.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(options.program[0], " is not valid for ", world_size,
                                                   " rank(s):\n", job.status().message()));
  }
  if (absl::Status fits = CheckTensorGroupsFitHosts(*job, plan); !fits.ok()) return fits;
  if (absl::Status cpu = CheckPrecisionOnCpu(job->ds, ranks_on_cpu); !cpu.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.program[0], " is not valid for ", world_size, " rank(s):\n", cpu.message()));
  }
  if (absl::Status nvme = CheckLocalNvmePath(*job, local); !nvme.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.program[0], " is not valid for ", world_size, " rank(s):\n", nvme.message()));
  }
  spec->tensor_parallel_size = std::max(1, job->ds.tensor_parallel.tp_size);
  spec->pipeline_stages = std::max(1, job->ds.pipeline.stages);
  if (spec->pipeline_stages > 1) spec->pipeline_partition = PipelinePartitionLines(*job);
  if (!job->not_yet_supported.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(options.program[0],
                                                   " asks for what this runtime does not support yet:\n  ",
                                                   absl::StrJoin(job->not_yet_supported, "\n  ")));
  }
  return absl::OkStatus();
}

// Note [Pipeline stages] before launch: the model's layer list sized
// without building it (runtime/estimate, checked against the built models'
// Layers() in model_tests) and cut as PipelineEngine cuts it.
std::vector<std::string> PipelinePartitionLines(const runtime::JobConfig& job) {
  const runtime::PipelineConfig& pipe = job.ds.pipeline;
  auto cut = [&]() -> absl::StatusOr<std::vector<std::string>> {
    DS_ASSIGN_OR_RETURN(std::vector<runtime::LayerSize> sizes, runtime::LayerSizesOf(job));
    std::vector<runtime::PipelineLayerInfo> layers;
    for (const runtime::LayerSize& size : sizes) layers.push_back({size.name, size.type, size.parameters});
    int virtual_stages = pipe.virtual_stages;
    std::vector<int> counts = pipe.layers_per_stage;
    if (pipe.num_layers_per_virtual_stage > 0) {
      DS_ASSIGN_OR_RETURN(runtime::VirtualStageCut chunks,
                          runtime::VirtualStagesOfBlocks(static_cast<int64_t>(layers.size()) - 2, pipe.stages,
                                                         pipe.num_layers_per_virtual_stage));
      if (pipe.virtual_stages > 1 && pipe.virtual_stages != chunks.virtual_stages) {
        return absl::InvalidArgumentError(absl::StrCat("pipeline.virtual_stages=", pipe.virtual_stages,
                                                       " disagrees with pipeline.num_layers_per_virtual_stage"));
      }
      virtual_stages = chunks.virtual_stages;
      counts = chunks.layers_per_part;
    }
    const int parts = pipe.stages * virtual_stages;
    std::vector<int> boundaries;
    if (!counts.empty()) {
      DS_ASSIGN_OR_RETURN(boundaries, runtime::PartitionByCounts(counts, static_cast<int>(layers.size())));
    } else {
      DS_ASSIGN_OR_RETURN(boundaries, runtime::PartitionLayers(layers, pipe.partition_method, parts));
    }
    // A stage with nothing to train is refused by the ranks (PipelineEngine::Cut).
    for (int stage = 0; stage < pipe.stages; ++stage) {
      int64_t trainable = 0;
      for (int part = stage; part < parts; part += pipe.stages) {
        for (int i = boundaries[part]; i < boundaries[part + 1]; ++i) trainable += sizes[i].trainable;
      }
      if (trainable == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("pipeline stage ", stage, " would hold no trainable parameter"));
      }
    }
    return runtime::DescribePartition(layers, boundaries);
  };
  absl::StatusOr<std::vector<std::string>> lines = cut();
  if (absl::IsFailedPrecondition(lines.status())) {
    return {absl::StrCat("(the ranks will refuse this cut: ", lines.status().message(), ")")};
  }
  if (!lines.ok()) return {absl::StrCat("(known once the ranks build the model: ", lines.status().message(), ")")};
  return *lines;
}

// One verdict. Valid: the resolved config on stdout, 0. Not valid because
// of keys not supported yet: those on stderr, 2. Either way, the keys that
// have no effect here are warnings on stderr first (Note [Keys without
// effect here]).
int PrintVerdict(const std::string& path, int world_size, const std::string& resolved,
                 const std::vector<std::string>& not_yet_supported, const std::vector<std::string>& without_effect) {
  for (const std::string& line : without_effect) Notice(absl::StrCat("warning: ", path, ": ", line));
  if (!not_yet_supported.empty()) {
    Notice(absl::StrCat(path, " is not valid for ", world_size,
                        " rank(s): it asks for what this runtime does not support yet:\n  ",
                        absl::StrJoin(not_yet_supported, "\n  ")));
    return kUsageError;
  }
  std::printf("%s is valid for %d rank(s); resolved:\n%s\n", path.c_str(), world_size, resolved.c_str());
  return 0;
}

int PrintInvalid(const std::string& path, int world_size, const absl::Status& status) {
  Notice(absl::StrCat(path, " is not valid for ", world_size, " rank(s):\n", status.message()));
  return kUsageError;
}

}  // namespace

bool IsJobFile(const std::string& path) {
  return absl::EndsWith(path, ".cfg") || absl::EndsWith(path, ".yaml") || absl::EndsWith(path, ".yml");
}

absl::Status UseJobFileIfGiven(const LauncherOptions& options, JobSpec* spec, bool ranks_on_cpu, bool local) {
  if (options.program.empty() || !IsJobFile(options.program[0])) {
    if (options.overrides.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "--override changes a job file's keys; it needs a .cfg/.yaml job file as PROGRAM");
  }
  const std::string job_file = std::filesystem::absolute(options.program[0]).string();
  if (absl::Status checked = CheckJobFile(options, job_file, spec, ranks_on_cpu, local); !checked.ok()) {
    return checked;
  }
  std::vector<std::string> program = {DsrankBinary(), job_file};
  for (const std::string& text : options.overrides) {
    program.push_back("--override");
    program.push_back(text);
  }
  program.insert(program.end(), options.program.begin() + 1, options.program.end());
  spec->program = program;
  spec->no_local_rank = true;
  spec->preempt_grace = std::chrono::milliseconds(options.preempt_grace_ms);
  spec->hang_timeout = std::chrono::milliseconds(options.hang_timeout_ms);
  return absl::OkStatus();
}

int ValidateConfigFile(const LauncherOptions& options, int world_size, bool ranks_on_cpu, bool local) {
  auto overrides = ParseOverrides(options.overrides);
  if (!overrides.ok()) return UsageError(overrides.status());
  const std::string& path = options.validate;
  runtime::WorldShape world{world_size};
  if (absl::EndsWith(path, ".json")) {
    std::vector<std::string> not_yet_supported, without_effect;
    auto config = runtime::LoadDsConfig(path, *overrides, world, &not_yet_supported, &without_effect);
    if (!config.ok()) return PrintInvalid(path, world_size, config.status());
    if (absl::Status cpu = CheckPrecisionOnCpu(*config, ranks_on_cpu); !cpu.ok()) {
      return PrintInvalid(path, world_size, cpu);
    }
    return PrintVerdict(path, world_size, runtime::DescribeDsConfig(*config), not_yet_supported, without_effect);
  }
  auto job = runtime::LoadJobConfig(path, *overrides, world);
  if (!job.ok()) return PrintInvalid(path, world_size, job.status());
  if (absl::Status cpu = CheckPrecisionOnCpu(job->ds, ranks_on_cpu); !cpu.ok()) {
    return PrintInvalid(path, world_size, cpu);
  }
  if (absl::Status nvme = CheckLocalNvmePath(*job, local); !nvme.ok()) return PrintInvalid(path, world_size, nvme);
  return PrintVerdict(path, world_size, runtime::DescribeJobConfig(*job), job->not_yet_supported,
                      job->without_effect);
}

}  // namespace dslaunch

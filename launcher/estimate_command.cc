#include "launcher/estimate_command.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/flag_table.h"
#include "launcher/launcher_notice.h"
#include "launcher/subcommand_flags.h"
#include "runtime/config/config_loader.h"
#include "runtime/estimate/estimate_report.h"

namespace dslaunch {

int RunEstimateCommand(const std::vector<std::string>& args) {
  using runtime::EstimateRequest;
  std::string model_file, precision;
  double params = 0, largest_layer = 0, gpu_memory_gib = 0;
  int64_t gpus = 1, nodes = 1, micro_batch = 0, sequence_length = 0;
  bool attention_scores = false, delay_update = false;
  FlagTable flags("dslaunch estimate",
                  "dslaunch estimate (--model JOB.cfg | --params N [--largest_layer_params N]) [flags]");
  flags.String("--model", &model_file, "JOB.cfg", "the job file whose model (and precision, micro batch) to size")
      .Double("--params", &params, "N", "instead of --model: trainable parameters (7e9 is fine)", {0, 1e15})
      .Double("--largest_layer_params", &largest_layer, "N",
              "with --params: the largest module's parameters (DeepSpeed's ZeRO-3 estimate; default Ψ/100)",
              {0, 1e15})
      .Int("--num_gpus", &gpus, "G", "GPUs per node", {1, 1024})
      .Int("--num_nodes", &nodes, "M", "nodes", {1, 100000})
      .Int("--micro_batch", &micro_batch, "B", "micro batch per GPU for the activations (default: the job's, or 1)",
           {0, 1 << 20})
      .Int("--sequence_length", &sequence_length, "S", "sequence length (default: the job's; 2048 with --params)",
           {0, 1 << 24})
      .String("--precision", &precision, "P", "bf16, fp16 or fp32 (default: the job's; bf16 with --params)",
              {"", "bf16", "fp16", "fp32"})
      .Double("--gpu_memory_gib", &gpu_memory_gib, "GIB", "also print the largest micro batch that fits this GPU",
              {0, 1e6})
      .Bool("--attention_scores", &attention_scores,
            "count the attention score matrices (LibTorch without fused attention, e.g. the CPU build)")
      .Bool("--delay_update", &delay_update, "offload rows with offload_optimizer.delay_update");
  if (EarlyExit early = ParseSubcommandFlags(flags, args, "estimate", " (give the job file as --model)")) {
    return *early;
  }
  if (model_file.empty() == (params == 0)) {
    Notice("estimate: give either --model JOB.cfg or --params N");
    return kUsageError;
  }
  EstimateRequest request;
  request.gpus_per_node = static_cast<int>(gpus);
  request.nodes = static_cast<int>(nodes);
  request.attention_scores_kept = attention_scores;
  request.delay_update = delay_update;
  request.gpu_memory_gib = gpu_memory_gib;
  std::string job_precision = "bf16";
  int64_t job_micro_batch = 1;
  if (!model_file.empty()) {
    absl::StatusOr<runtime::JobConfig> job =
        runtime::LoadJobConfig(model_file, {}, runtime::WorldShape{static_cast<int>(gpus * nodes)});
    if (!job.ok()) {
      Notice(std::string(job.status().message()));
      return 1;
    }
    absl::StatusOr<runtime::ModelSize> size = runtime::ModelSizeOf(*job);
    if (!size.ok()) {
      Notice(std::string(size.status().message()));
      return 1;
    }
    request.model = *size;
    job_precision = job->train.precision;
    if (job->ds.bf16.enabled) job_precision = "bf16";
    if (job->ds.fp16.enabled) job_precision = "fp16";
    if (job->ds.train_micro_batch_size_per_gpu > 0) job_micro_batch = job->ds.train_micro_batch_size_per_gpu;
    request.delay_update = request.delay_update || job->ds.zero_optimization.offload_optimizer.delay_update;
  } else {
    runtime::ModelSize& m = request.model;
    m.trainable = static_cast<int64_t>(std::llround(params));
    m.largest_layer = largest_layer > 0 ? static_cast<int64_t>(std::llround(largest_layer)) : m.trainable / 100;
    m.description = "a model of --params (no shape given: activations are not estimated)";
  }
  if (sequence_length > 0) request.model.sequence_length = sequence_length;
  request.precision = precision.empty() ? job_precision : precision;
  request.compute_bytes = request.precision == "fp32" ? 4 : 2;
  request.micro_batch = micro_batch > 0 ? micro_batch : job_micro_batch;
  std::fputs(runtime::EstimateReport(request).c_str(), stdout);
  return 0;
}

}  // namespace dslaunch

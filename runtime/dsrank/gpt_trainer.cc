#include "runtime/dsrank/gpt_trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <fstream>
#include <new>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/rank_contract.h"
#include "common/status_macros.h"
#include "common/store_client.h"
#include "kernels/cpu_adam.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/checkpoint/engine_checkpointer.h"
#include "runtime/config/config_loader.h"
#include "runtime/data/distributed_sampler.h"
#include "runtime/data/gpt_samples.h"
#include "runtime/data/indexed_dataset.h"
#include "runtime/data/instruction_dataset.h"
#include "runtime/data/instruction_samples.h"
#include "runtime/data/prepare_dataset.h"
#include "runtime/dsrank/flops_profiler.h"
#include "runtime/dsrank/instruction_data.h"
#include "runtime/dsrank/job_comms_logger.h"
#include "runtime/dsrank/model_utilization.h"
#include "runtime/dsrank/moe_telemetry.h"
#include "runtime/moe/moe_layer.h"
#include "runtime/dsrank/progress_line.h"
#include "runtime/dsrank/step_breakdown.h"
#include "runtime/dsrank/step_metrics.h"
#include "runtime/dsrank/trainer_setup.h"
#include "runtime/dsrank/training_batches.h"
#include "runtime/engine/engine.h"
#include "runtime/model/seeded_parameter_source.h"
#include "runtime/fs/file_system.h"
#include "runtime/hf/hf_export.h"
#include "runtime/hf/hf_model_folder.h"
#include "runtime/hf/hf_weights.h"
#include "runtime/model/fused_ops.h"
#include "runtime/model/lora.h"
#include "runtime/model/model_registry.h"
#include "runtime/monitor/training_monitors.h"
#include "runtime/pipeline/pipeline_engine.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds since the epoch, for the monitors' wall-time stamps.
double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// This process's peak resident host memory (ru_maxrss is in KiB on Linux).
double PeakResidentGib() {
  struct rusage usage {};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return usage.ru_maxrss / double(1 << 20);
}

constexpr char kConsumedSamples[] = "consumed_samples";
// Note [Swap path probe]: long enough to pass a drive's cache warm-up, short
// enough to cost well under a second on an NVMe drive.
constexpr int64_t kNvmeProbeBytes = int64_t{256} << 20;

// Instruction records (data.format other than text) -> data.prepared when
// the pair does not exist yet: "ok" or what went wrong.
std::string PrepareInstructionsIfMissing(const JobConfig& job, const TrainerContext& context) {
  const std::string& prefix = job.data.prepared;
  if (InstructionDataset::Exists(prefix)) return "ok";
  if (job.data.records.empty()) {
    return absl::StrCat(job.path, ": instruction dataset ", prefix, " does not exist and data.records is empty");
  }
  absl::StatusOr<InstructionPrepareOptions> options = InstructionPrepareOptionsFor(job);
  if (!options.ok()) return std::string(options.status().message());
  const absl::Status folder = context.file_system->CreateDirectories(ParentDirectory(prefix));
  absl::StatusOr<InstructionPrepareSummary> summary =
      folder.ok() ? PrepareInstructionDataset(*options) : absl::StatusOr<InstructionPrepareSummary>(folder);
  if (!summary.ok()) return absl::StrCat("preparing ", prefix, ": ", summary.status().message());
  for (const std::string& skipped : summary->skipped_examples) {
    absl::FPrintF(context.out, "dsrank: skipped %s\n", skipped);
  }
  absl::FPrintF(context.out, "dsrank: prepared %s (%s): %s\n", prefix, job.data.format, summary->ToString());
  return "ok";
}

// Rank 0 prepares the dataset when it does not exist yet; the others wait for
// its verdict in the store.
absl::Status EnsureDataset(const JobConfig& job, const TrainerContext& context) {
  const std::string& prefix = job.data.prepared;
  if (prefix.empty()) return absl::InvalidArgumentError(absl::StrCat(job.path, ": data.prepared is not set"));
  const std::string key = store_keys::kDataReady;
  if (context.rank == 0) {
    std::string verdict = "ok";
    if (job.data.instruction()) {
      verdict = PrepareInstructionsIfMissing(job, context);
    } else if (!IndexedDataset::Exists(prefix)) {
      if (job.data.text_files.empty()) {
        verdict = absl::StrCat(job.path, ": dataset ", prefix,
                               " does not exist and data.text_files is empty");
      } else {
        PrepareOptions options;
        options.inputs = job.data.text_files;
        options.output_prefix = prefix;
        options.tokenizer = job.data.tokenizer;
        options.model_dir = job.model.from;
        options.vocab_size = job.data.tokenizer_vocab_size;
        options.split_on_percent_lines = job.data.split_on_percent_lines;
        const absl::Status folder = context.file_system->CreateDirectories(ParentDirectory(prefix));
        absl::StatusOr<PrepareSummary> summary =
            folder.ok() ? PrepareDataset(options) : absl::StatusOr<PrepareSummary>(folder);
        if (summary.ok()) {
          absl::FPrintF(context.out, "dsrank: prepared %s: %s\n", prefix, summary->ToString());
        } else {
          verdict = absl::StrCat("preparing ", prefix, ": ", summary.status().message());
        }
      }
    }
    if (context.store != nullptr) {
      absl::Status published = context.store->Set(key, verdict);
      if (!published.ok()) return published;
    }
    return verdict == "ok" ? absl::OkStatus() : absl::FailedPreconditionError(verdict);
  }
  auto verdict = context.store->WaitGet(key, std::chrono::minutes(30));
  if (!verdict.ok()) return verdict.status();
  if (*verdict != "ok") {
    return absl::FailedPreconditionError(absl::StrCat("rank 0 could not prepare the data: ", *verdict));
  }
  return absl::OkStatus();
}

double MeanOverWorld(double value, const TrainerContext& context) {
  if (context.world == nullptr || context.world->size() == 1) return value;
  torch::Tensor t = torch::full({1}, value, torch::TensorOptions().dtype(torch::kDouble).device(context.device));
  if (!context.world->AllReduce(t, ReduceOp::kSum).ok()) return value;
  return t.item<double>() / context.world->size();
}

// Note [Preemption]: dslaunch writes "control/preempt" into the store on
// SIGTERM/SIGUSR1. Rank 0 looks at every step boundary (a store round trip,
// made while the GPU works through backward) and the group agrees through
// the step's loss all-reduce (SummarizeStep), so every rank saves the same
// step.
bool PreemptionFlagInStore(const TrainerContext& context) {
  if (context.store == nullptr || context.rank != 0) return false;
  auto value = context.store->Get(store_keys::kPreempt);
  return value.ok() && value->has_value();
}

struct StepSummary {
  double mean_loss = 0;
  bool preempted = false;
};

// The loss averaged over the world and whether any rank saw the preemption
// flag: one all-reduce (and one wait) per step for both.
// Every stage's [forward, backward, transfers, schedule] seconds (a
// collective over the pipeline group).
absl::StatusOr<std::vector<std::array<double, 4>>> GatherStageSeconds(PipelineEngine& pipe,
                                                                      const std::array<double, 4>& mine,
                                                                      const TrainerContext& context) {
  auto gathered = pipe.GatherOverStages(std::vector<double>(mine.begin(), mine.end()));
  if (!gathered.ok()) return gathered.status();
  std::vector<std::array<double, 4>> out;
  for (const std::vector<double>& stage : *gathered) out.push_back({stage[0], stage[1], stage[2], stage[3]});
  return out;
}

// --pipeline_timeline: every stage's instructions of this step, written by
// rank 0 (a collective over each pipeline group).
absl::Status WriteTimeline(PipelineEngine& pipe, const std::vector<PipelineEvent>& mine,
                           const TrainerContext& context) {
  auto all = pipe.GatherTimelines(mine);
  if (!all.ok()) return all.status();
  if (context.rank != 0) return absl::OkStatus();
  if (absl::Status s = WritePipelineTimeline(context.pipeline_timeline, *all); !s.ok()) return s;
  absl::FPrintF(context.out, "dsrank: wrote the pipeline timeline of this step to %s\n", context.pipeline_timeline);
  return absl::OkStatus();
}

StepSummary SummarizeStep(double loss, bool preempt_flag, const TrainerContext& context) {
  if (context.world == nullptr || context.world->size() == 1) return {loss, preempt_flag};
  torch::Tensor t = torch::tensor({loss, preempt_flag ? 1.0 : 0.0}, torch::TensorOptions().dtype(torch::kDouble))
                        .to(context.device);
  if (!context.world->AllReduce(t, ReduceOp::kSum).ok()) return {loss, false};
  t = t.cpu();
  return {t.data_ptr<double>()[0] / context.world->size(), t.data_ptr<double>()[1] > 0};
}

absl::Status RunTraining(const JobConfig& job, const TrainerContext& context);

}  // namespace

absl::Status TrainGpt(const JobConfig& job, const TrainerContext& context) {
  // LibTorch reports failures inside forward (out of device memory, a
  // collective that failed in a ZeRO-3 gather) as exceptions: one clear line
  // and a non-zero exit instead of an abort with a stack of frames.
  try {
    return RunTraining(job, context);
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    const bool memory = what.find("out of memory") != std::string::npos;
    return memory ? absl::ResourceExhaustedError(absl::StrCat("training stopped: ", what))
                  : absl::InternalError(absl::StrCat("training stopped: ", what));
  } catch (const std::bad_alloc&) {
    // Host memory, outside LibTorch's allocator (a model or batch too large
    // for this machine, within the bounds of runtime/config/config_limits.h).
    return absl::ResourceExhaustedError(
        absl::StrCat("training stopped: out of host memory (", job.model.layers, " layers of width ",
                     job.model.width, ", micro-batch ", job.ds.train_micro_batch_size_per_gpu, ")"));
  }
}

namespace {

absl::Status RunTraining(const JobConfig& job, const TrainerContext& context) {
  if (auto s = EnsureDataset(job, context); !s.ok()) return s;
  DS_ASSIGN_OR_RETURN(TrainingData data, OpenTrainingData(job, context));
  std::unique_ptr<TrainingBatches>& train_samples = data.train;
  std::unique_ptr<TrainingBatches>& eval_samples = data.eval;

  DS_ASSIGN_OR_RETURN(ModelSpec spec, TrainingModelSpec(job, context, data.vocab));
  // model.from: a Hugging Face folder gives the sizes and the weights,
  // checked whole before the engine starts (runtime/hf/hf_weights.h).
  std::unique_ptr<HfModelFolder> pretrained;
  if (!job.model.from.empty()) {
    auto opened = HfModelFolder::Open(*context.file_system, job.model.from);
    if (!opened.ok()) return opened.status();
    pretrained = std::move(*opened);
    spec.hf_config_text = pretrained->config_text();
    spec.hf_config_path = pretrained->config_path();
  }
  // Note [Shard-only loading]: at ZeRO-3 no rank builds the model whole
  // (DeepSpeed's zero.Init); each reads its own pieces from the folder, or
  // draws them from the seed.
  spec.deferred_parameters = job.ds.zero_optimization.stage == 3 && job.ds.pipeline.stages <= 1;
  // Note [Model interface]: the family by name.
  absl::StatusOr<BuiltModel> built = BuildModel(spec, job.train.seed);
  if (!built.ok()) return built.status();
  // The rank's random stream (dropout, routing noise) starts once the model
  // is built: LibTorch's module constructors draw from it, and how much of
  // the model a rank holds (its experts, its slices) must not shift it.
  torch::manual_seed(job.train.seed + context.rank);
  ModelInterface* model = built->model;
  // Null once the weights are in the module (the mappings go); with deferred
  // parameters, what the engine reads them from.
  std::unique_ptr<HfParameterSource> pretrained_values;
  std::unique_ptr<SeededParameterSource> seeded_values;
  if (pretrained) {
    DS_ASSIGN_OR_RETURN(pretrained_values, LoadPretrainedWeights(std::move(pretrained), *built, spec, job, context));
  } else if (spec.deferred_parameters) {
    // Before LoRA adds its adapters: the draws are the built model's.
    seeded_values = std::make_unique<SeededParameterSource>(*built->module, model->TensorParallelForms(),
                                                            spec.tensor_parallel, model->InitialValues(job.train.seed));
  }
  const ParameterSource* deferred_values =
      pretrained_values ? static_cast<const ParameterSource*>(pretrained_values.get()) : seeded_values.get();
  DS_ASSIGN_OR_RETURN(TrainingExports exports, ApplyLoraAndPlanExports(job, context, *built));
  const HfExportOptions& export_options = exports.model;
  const HfExportOptions& adapter_options = exports.adapter;
  // Before a pipeline releases other stages' layers.
  const int64_t parameter_count = model->ParameterCount();
  // Note [Pipeline stages]: with pipeline.stages > 1 the pipeline cuts the
  // model and creates this stage's engine; one step is one schedule.
  // Note [Comms logger]: declared before the engines, so that it outlives
  // their communication threads (a call in flight may still record into it).
  std::unique_ptr<JobCommsLogger> comms_logger;
  std::unique_ptr<PipelineEngine> pipe;
  std::unique_ptr<Engine> plain_engine;
  {
    std::shared_ptr<const ParallelState> parallel =
        context.parallel ? context.parallel : ParallelState::DataParallelOnly(nullptr);
    if (job.ds.pipeline.stages > 1) {
      auto created = PipelineEngine::Create(built->module, job.ds, parallel, context.device);
      if (!created.ok()) return created.status();
      pipe = std::move(*created);
    } else {
      auto created = Engine::Create(built->module, job.ds, parallel, context.device, std::nullopt, deferred_values);
      if (!created.ok()) return created.status();
      plain_engine = std::move(*created);
    }
  }
  if (pretrained_values) {
    if (context.rank == 0) {
      absl::FPrintF(context.out, "dsrank: rank 0 read %d of the %d bytes of %s's tensors (its ZeRO-3 pieces)\n",
                    pretrained_values->bytes_read(), pretrained_values->folder_bytes(), job.model.from);
    }
    pretrained_values.reset();
  }
  seeded_values.reset();
  // What building and loading the model took (DeepSpeed's see_memory_usage
  // at initialisation).
  if (context.rank == 0) {
    absl::FPrintF(context.out, "dsrank: engine ready; rank 0's peak host memory so far %.0f MiB\n",
                  PeakResidentGib() * 1024);
  }
  Engine* const engine = pipe ? &pipe->engine() : plain_engine.get();
  const DsConfig& ds = job.ds;
  // Each data-parallel replica reads its own rows; the ranks of a tensor
  // group read the same ones.
  Communicator* data_group = context.parallel ? context.parallel->data() : nullptr;
  auto sampler = DistributedSampler::Create(data_group ? data_group->rank() : 0, data_group ? data_group->size() : 1,
                                            static_cast<int>(ds.train_micro_batch_size_per_gpu),
                                            static_cast<int>(ds.gradient_accumulation_steps));
  if (!sampler.ok()) return sampler.status();
  // Note [Dropout streams]: the masks of a model replica (the same on every
  // rank of its tensor group and pipeline) from the job's seed, step by step.
  DropoutStream* const dropout = model->dropout_stream();
  if (dropout != nullptr) {
    dropout->Reseed(DropoutStream::ReplicaSeed(job.train.seed, data_group ? data_group->rank() : 0));
  }

  int64_t consumed = 0;
  const std::string& checkpoint_dir = job.checkpoint.dir;
  EngineCheckpointer checkpointer(*engine, *context.file_system);
  // Note [Committed checkpoints]: a restart resumes from the tag the
  // controller recorded as committed; a fresh job from `latest`. Note
  // [Resuming from a verified checkpoint]: one that does not verify is named
  // and skipped for the newest one that does; Note [Resuming together]: the
  // ranks verify shares of it and agree. Each rank prints what it found (rank
  // 0 what they found together).
  if (!checkpoint_dir.empty() && job.checkpoint.resume) {
    absl::StatusOr<EngineCheckpointer::Resumed> resumed = checkpointer.Resume(checkpoint_dir, context.resume_tag);
    if (!resumed.ok()) return resumed.status();
    const ResumeChoice& choice = resumed->choice;
    for (const std::string& note : choice.notes) absl::FPrintF(context.out, "dsrank: %s\n", note);
    if (!choice.tag.empty()) {
      if (auto it = resumed->client.find(kConsumedSamples); it != resumed->client.end()) {
        consumed = it->second;
      } else {
        // A checkpoint saved without the sampler's position (the C++ API's
        // SaveCheckpoint with other client state): every step it counts took
        // one global batch; said, never a silent start at sample 0.
        consumed = engine->global_steps() * sampler->global_batch();
        if (context.rank == 0) {
          absl::FPrintF(context.out,
                        "dsrank: checkpoint %s/%s holds no %s: the data goes on at sample %d (%d steps of %d)\n",
                        checkpoint_dir, choice.tag, kConsumedSamples, consumed, engine->global_steps(),
                        sampler->global_batch());
        }
      }
      if (context.rank == 0) {
        const bool as_recorded = !context.resume_tag.empty() && choice.tag == context.resume_tag;
        absl::FPrintF(context.out, "dsrank: resumed from %s/%s at step %d%s\n", checkpoint_dir, choice.tag,
                      engine->global_steps(),
                      as_recorded ? " (the last checkpoint the controller recorded as committed)" : "");
      }
      if (context.rank == 0 && engine->global_steps() >= job.train.steps) {
        absl::FPrintF(context.out,
                      "dsrank: nothing to train: checkpoint %s/%s is at step %d and train.steps is %d. To train "
                      "further, raise train.steps (--override train.steps=N); to start from step 1, use "
                      "another checkpoint.dir (%s is kept), or set checkpoint.resume=false, and a save of a "
                      "step already there replaces it\n",
                      checkpoint_dir, choice.tag, engine->global_steps(), job.train.steps, checkpoint_dir);
      }
    } else if (context.rank == 0) {
      absl::FPrintF(context.out, "dsrank: %s: training from step 1\n",
                    choice.skipped > 0 ? absl::StrCat("no checkpoint in ", checkpoint_dir, " verifies (",
                                                      choice.skipped,
                                                      " skipped: each kept until this run saves a step of its name)")
                                       : absl::StrCat("no checkpoint in ", checkpoint_dir, " yet"));
    }
    std::fflush(context.out);
  }
  // Every rank's part is written once Save returns (its commit
  // protocol); rank 0 then records the tag for the controller.
  auto save = [&](int64_t step) -> absl::Status {
    const std::string tag = absl::StrCat("global_step", step);
    absl::Status saved = checkpointer.Save(checkpoint_dir, tag, {{kConsumedSamples, consumed}}, job.checkpoint.keep);
    for (const std::string& note : checkpointer.notes()) absl::FPrintF(context.out, "dsrank: %s\n", note);
    if (saved.ok() && context.rank == 0) {
      if (context.store != nullptr) (void)context.store->Set(store_keys::kCheckpointCommitted, tag);
      absl::FPrintF(context.out, "dsrank: checkpoint %s/%s committed\n", checkpoint_dir, tag);
      std::fflush(context.out);
    }
    return saved;
  };
  // Note [Swap path probe]: every rank through its own folder (the ranks of
  // a host share the drive, as their steps will); rank 0 reports.
  absl::StatusOr<std::vector<std::string>> swap_cost = engine->ProbeNvmePath(kNvmeProbeBytes);
  if (!swap_cost.ok()) return swap_cost.status();
  if (context.rank == 0) {
    absl::FPrintF(context.out, "dsrank: %s with %d parameters, %d rank(s), device %s, %s\n",
                  model->family() == "gpt" ? std::string("GPT") : model->family(), parameter_count, context.world_size, context.device.str(),
                  c10::toString(engine->compute_dtype()));
    if (pipe) {
      absl::FPrintF(context.out, "dsrank: pipeline: %s schedule, %d stages%s, %d micro-batches per step; layers:\n",
                    PipelineScheduleName(pipe->schedule()), pipe->stages(),
                    pipe->shape().virtual_stages > 1 ? absl::StrCat(" x ", pipe->shape().virtual_stages, " virtual")
                                                     : std::string(),
                    pipe->shape().micro_batches);
      for (const std::string& line : pipe->partition_lines()) absl::FPrintF(context.out, "  %s\n", line);
    }
    if (ds.zero_optimization.offload_optimizer.device != "none") {
      absl::FPrintF(context.out, "dsrank: CPU Adam: %s on %d threads (%s to change)\n", kernels::CpuAdamIsa(),
                    kernels::CpuAdamThreads(), rank_env::kCpuAdamThreads);
    }
    if (const std::string nvme = engine->NvmeOffloadDescription(); !nvme.empty()) {
      absl::FPrintF(context.out, "dsrank: NVMe offload (aio keys from %s): %s\n", ds.aio_section, nvme);
      for (const std::string& line : *swap_cost) absl::FPrintF(context.out, "dsrank: nvme_path %s\n", line);
    }
    std::fflush(context.out);
  }
  std::ofstream loss_log;
  if (context.rank == 0 && !context.loss_log.empty()) {
    loss_log.open(context.loss_log, std::ios::app);
    if (!loss_log) return absl::PermissionDeniedError(absl::StrCat("cannot write --loss_log ", context.loss_log));
  }

  // Note [Monitor metrics]: rank 0 writes the ds_config's monitors.
  std::unique_ptr<TrainingMonitors> monitors;
  if (context.rank == 0) {
    char host[256] = {};
    (void)::gethostname(host, sizeof(host) - 1);
    DS_ASSIGN_OR_RETURN(monitors, TrainingMonitors::Open(ds, *context.file_system,
                                                         MonitorStart{consumed, ParentDirectory(job.path), host,
                                                                      ::getpid(), WallSeconds()}));
    if (monitors) {
      for (const std::string& line : monitors->Describe()) absl::FPrintF(context.out, "dsrank: %s\n", line);
      std::fflush(context.out);
    }
  }

  const int64_t tokens_per_step = sampler->global_batch() * job.model.sequence_length;
  // Note [Model FLOPs]: on a GPU the step line adds TFLOP/s per GPU and MFU.
  const ModelUtilization utilization = ModelUtilizationOf(job, context);
  const double flops_per_token = utilization.flops_per_token, peak_flops = utilization.peak_flops;
  auto window_start = Clock::now();
  int64_t window_steps = 0;
  double forward_backward_seconds = 0, step_seconds = 0, overlapped_seconds = 0;
  // This stage's forward, backward, transfer and schedule seconds.
  std::array<double, 4> pipeline_seconds{};
  int64_t last_saved = -1;
  int64_t nonfinite_in_a_row = 0;
  // Note [Flops profiler]: one step measured, then one pass layer by layer.
  if (absl::Status profilable = FlopsProfiler::Check(job); !profilable.ok()) return profilable;
  DS_ASSIGN_OR_RETURN(std::unique_ptr<FlopsProfiler> flops_profiler,
                      FlopsProfiler::Create(ds.flops_profiler, context.device, context.rank));
  std::optional<TokenBatch> profiled_batch;  // the profiled step's first micro-batch, until its report
  // Note [Comms logger]: the training loop's collectives (not the load's).
  comms_logger = JobCommsLogger::Attach(ds.comms_logger, context.rank_runtime, context.rank, context.out);
  const auto training_start = Clock::now();
  const int64_t first_step = engine->global_steps() + 1;  // of this attempt (after a resume)
  if (flops_profiler && context.rank == 0 &&
      (ds.flops_profiler.profile_step < first_step || ds.flops_profiler.profile_step > job.train.steps)) {
    absl::FPrintF(context.out, "dsrank: warning: flops_profiler.profile_step=%d is outside the steps this run trains "
                  "(%d-%d): no profile\n", ds.flops_profiler.profile_step, first_step, job.train.steps);
  }
  const std::string optimizer_in_use = OptimizerInUse(ds);
  // The first micro-batch of the next step, read while the GPU works.
  std::optional<TokenBatch> prefetched;
  while (engine->global_steps() < job.train.steps) {
    built->module->train();
    // The loss stays on the device until the step is over: reading it after
    // forward would stall the GPU while backward is being queued.
    torch::Tensor step_loss_sum;
    StepResult result;
    const int64_t step = engine->global_steps() + 1;
    const auto step_began = Clock::now();
    if (dropout != nullptr) dropout->StartStep(step);
    const double step_seconds_before = step_seconds;
    bool preempt_flag = false;
    double step_loss = 0;
    if (pipe) {
      // One schedule over the step's micro-batches (every stage reads them;
      // the first stage its tokens, the last its targets, all the shape).
      std::vector<TokenBatch> batches;
      for (int micro = 0; micro < ds.gradient_accumulation_steps; ++micro) {
        absl::Status read;
        batches.push_back(prefetched ? *std::exchange(prefetched, std::nullopt)
                                     : train_samples->Load(sampler->MicroBatchIndices(consumed, micro), context.device,
                                                           &read));
        if (!read.ok()) return read;
      }
      preempt_flag = PreemptionFlagInStore(context);
      if (step == context.raise_at_step && context.rank == context.raise_rank && context.attempt == 0) {
        pipe->FailForwardForTesting(/*micro_batch=*/1);
      }
      if (step == context.shape_fault_at_step && context.rank == context.raise_rank && context.attempt == 0) {
        pipe->MisstateShapeForTesting(/*micro_batch=*/0);  // the first, whose transfer carries the header
      }
      auto trained = pipe->TrainBatch(batches);
      if (!trained.ok()) return trained.status();
      result = trained->step;
      step_loss = trained->loss;
      forward_backward_seconds += trained->schedule_seconds;
      step_seconds += trained->step_seconds;
      pipeline_seconds[0] += trained->forward_seconds;
      pipeline_seconds[1] += trained->backward_seconds;
      pipeline_seconds[2] += trained->transfer_seconds;
      pipeline_seconds[3] += trained->schedule_seconds;
      if (!context.pipeline_timeline.empty() && step == std::min<int64_t>(2, job.train.steps)) {
        if (absl::Status s = WriteTimeline(*pipe, trained->timeline, context); !s.ok()) return s;
      }
    } else {
      for (int micro = 0; micro < ds.gradient_accumulation_steps; ++micro) {
        absl::Status read;
        TokenBatch batch = prefetched ? *std::exchange(prefetched, std::nullopt)
                                      : train_samples->Load(sampler->MicroBatchIndices(consumed, micro), context.device, &read);
        if (!read.ok()) return read;
        auto started = Clock::now();
        const bool profiling = flops_profiler && micro == 0 && flops_profiler->ProfilesStep(step);
        if (profiling) profiled_batch = batch, flops_profiler->Mark(FlopsProfiler::kForwardBegin);
        torch::Tensor loss = model->BatchLoss(batch);
        if (profiling) flops_profiler->Mark(FlopsProfiler::kForwardEnd);
        torch::Tensor detached = loss.detach().to(torch::kDouble);
        step_loss_sum = step_loss_sum.defined() ? step_loss_sum + detached : detached;
        if (auto s = engine->Backward(loss); !s.ok()) return s;
        if (profiling) flops_profiler->Mark(FlopsProfiler::kBackwardEnd);
        auto backward_done = Clock::now();
        if (micro + 1 == ds.gradient_accumulation_steps) {
          // What does not need the step's results runs while the GPU still
          // works through backward, not after the optimizer step has drained
          // it: the preemption flag (a store round trip on rank 0) and the
          // next step's first micro-batch. Progress waits for the step: it
          // counts finished steps.
          preempt_flag = PreemptionFlagInStore(context);
          if (step < job.train.steps) {
            prefetched = train_samples->Load(sampler->MicroBatchIndices(consumed + sampler->global_batch(), 0),
                                             context.device, &read);
            // A failed read is the next step's error: this step finishes (and
            // saves) first, and the next one reads again and reports it.
            if (!read.ok()) prefetched.reset();
          }
          overlapped_seconds += std::chrono::duration<double>(Clock::now() - backward_done).count();
        }
        auto step_started = Clock::now();
        if (profiled_batch) flops_profiler->Mark(FlopsProfiler::kStepBegin);
        auto stepped = engine->Step();
        if (!stepped.ok()) return stepped.status();
        result = *stepped;
        if (profiled_batch) flops_profiler->Mark(FlopsProfiler::kStepEnd);
        forward_backward_seconds += std::chrono::duration<double>(backward_done - started).count();
        step_seconds += std::chrono::duration<double>(Clock::now() - step_started).count();
      }
      step_loss = step_loss_sum.item<double>() / ds.gradient_accumulation_steps;
      if (profiled_batch) {
        const int data_size = context.parallel ? static_cast<int>(context.parallel->group(GroupKind::kData).members.size()) : 1;
        const ProfileShape shape{context.world_size, data_size, context.world_size / std::max(1, data_size),
                                 sampler->global_batch()};
        DS_RETURN_IF_ERROR(
            flops_profiler->Report(step, *profiled_batch, *model, *built->module, shape, context.rank, context.out));
        profiled_batch.reset();
      }
    }
    // Progress for the controller's hang detection (--hang_timeout_ms): the
    // heartbeat thread reports every rank's step through its agent. Until
    // the agent has accepted a heartbeat (or without heartbeats), rank 0
    // also publishes its step in the store, as other programs do; after
    // that, the controller reads the heartbeats and the round trip (made
    // after the step's last wait, while the GPU idles) is left out.
    if (context.rank_runtime != nullptr) context.rank_runtime->ReportStep(step);
    const bool heartbeats_carry_progress =
        context.rank_runtime != nullptr && context.rank_runtime->heartbeats_accepted();
    if (context.rank == 0 && context.store != nullptr && !heartbeats_carry_progress) {
      (void)context.store->Set(store_keys::kProgressStep, absl::StrCat("step ", step));
    }
    // Note [Non-finite guard]: the engine skipped a step whose loss or
    // gradient norm was not finite (every rank decides the same); so many in
    // a row mean training has diverged, and it stops here, before a
    // checkpoint or another step.
    if (result.nonfinite) {
      ++nonfinite_in_a_row;
      if (context.rank == 0) {
        absl::FPrintF(context.out,
                      "dsrank: step %d skipped: its loss or gradient norm is not finite (%d in a row, "
                      "train.max_nonfinite_steps=%d)\n",
                      step, nonfinite_in_a_row, job.train.max_nonfinite_steps);
        std::fflush(context.out);
      }
      if (nonfinite_in_a_row >= job.train.max_nonfinite_steps) {
        return absl::FailedPreconditionError(absl::StrCat(
            "training diverged: the loss or gradient norm was not finite in ", nonfinite_in_a_row,
            " steps in a row (steps ", step - nonfinite_in_a_row + 1, "-", step,
            ", train.max_nonfinite_steps=", job.train.max_nonfinite_steps,
            "); every one was skipped, so the parameters are those after step ", step - nonfinite_in_a_row,
            last_saved > 0 ? absl::StrCat(", and the last checkpoint is global_step", last_saved) : std::string()));
      }
    } else if (result.boundary) {
      nonfinite_in_a_row = 0;
    }
    consumed += sampler->global_batch();
    ++window_steps;
    const StepSummary summary = SummarizeStep(step_loss, preempt_flag, context);
    const double mean_loss = summary.mean_loss;
    if (loss_log.is_open()) loss_log << absl::StrFormat("%d\t%.9g\n", step, mean_loss) << std::flush;
    if (context.rank_runtime != nullptr) {  // for `dslaunch status` and /metrics, with the next heartbeat
      const double wall = std::chrono::duration<double>(Clock::now() - step_began).count();
      context.rank_runtime->ReportMetrics(StepMetrics(job.train.steps, mean_loss, result.lr, wall, tokens_per_step,
                                                      sampler->global_batch(), context.device));
    }
    const bool printing = step % ds.steps_per_print == 0 || step == job.train.steps;
    // model.moe.telemetry: each expert layer's routing of the step's last
    // micro-batch, summed over every rank (a collective, on every rank): at
    // the printed steps, and at every step when monitors write it.
    std::vector<MoeLayerRouting> moe_routing;
    if (job.model.moe.telemetry && (printing || ds.tensorboard.enabled || ds.csv_monitor.enabled)) {
      DS_ASSIGN_OR_RETURN(moe_routing, GatherMoeRouting(*built->module, context));
    }
    if (monitors) {
      namespace metric = monitor_metric;
      const double wall = std::chrono::duration<double>(Clock::now() - step_began).count();
      std::vector<MonitorEvent> events = {{metric::kTrainLoss, mean_loss, consumed},
                                          {metric::kLearningRate, result.lr, consumed}};
      if (ds.fp16.enabled) events.push_back({metric::kLossScale, result.loss_scale, consumed});
      if (result.boundary) events.push_back({metric::kGradNorm, result.grad_norm, consumed});
      events.push_back({metric::kSkippedSteps, static_cast<double>(engine->skipped_steps()), consumed});
      if (wall > 0) {
        events.push_back({metric::kSamplesPerSecond, sampler->global_batch() / wall, consumed});
        events.push_back({metric::kTokensPerSecond, tokens_per_step / wall, consumed});
        if (flops_per_token > 0) {
          const double per_gpu = tokens_per_step / wall * flops_per_token / context.world_size;
          events.push_back({metric::kTflopsPerGpu, per_gpu / 1e12, consumed});
          if (peak_flops > 0) events.push_back({metric::kMfu, per_gpu / peak_flops, consumed});
        }
      }
      if (ds.wall_clock_breakdown) {
        events.push_back({metric::kStepMilliseconds, 1000 * (step_seconds - step_seconds_before), consumed});
      }
      if (context.device.is_cuda()) {
        events.push_back({metric::kPeakGpuGib,
                          compat::CudaPeakAllocatedBytes(context.device.index()) / double(1 << 30), consumed});
      }
      events.push_back({metric::kHostPeakRssGib, PeakResidentGib(), consumed});
      for (MonitorEvent& event : MoeRoutingEvents(moe_routing, consumed)) events.push_back(std::move(event));
      DS_RETURN_IF_ERROR(monitors->Write(events, WallSeconds()));
    }
    // Every stage's times, gathered on all ranks (a collective).
    std::vector<std::array<double, 4>> stage_seconds;
    if (pipe && printing && ds.wall_clock_breakdown) {
      auto gathered = GatherStageSeconds(*pipe, pipeline_seconds, context);
      if (!gathered.ok()) return gathered.status();
      stage_seconds = std::move(*gathered);
    }
    if (context.rank == 0 && printing) {
      const double seconds = std::chrono::duration<double>(Clock::now() - window_start).count();
      const double elapsed = std::chrono::duration<double>(Clock::now() - training_start).count();
      const double tokens_per_second = seconds > 0 ? window_steps * tokens_per_step / seconds : 0.0;
      std::string utilisation;
      if (flops_per_token > 0) {
        const double per_gpu = tokens_per_second * flops_per_token / context.world_size;
        absl::StrAppendFormat(&utilisation, " TFLOP/s/GPU=%.1f", per_gpu / 1e12);
        if (peak_flops > 0) absl::StrAppendFormat(&utilisation, " MFU=%.1f%%", 100 * per_gpu / peak_flops);
      }
      absl::FPrintF(context.out, "step=%d loss=%.4f lr=%.3e loss_scale=%g tokens/s=%.0f%s | %s\n", step, mean_loss,
                    result.lr, result.loss_scale, tokens_per_second, utilisation,
                    ProgressText(step, first_step, job.train.steps, elapsed, optimizer_in_use));
      for (const MoeLayerRouting& routing : moe_routing) absl::FPrintF(context.out, "  %s\n", MoeRoutingLine(routing));
      if (ds.wall_clock_breakdown) {
        PrintWallClockBreakdown(context.out,
                                WallClockWindow{window_steps, seconds, forward_backward_seconds, step_seconds,
                                                overlapped_seconds},
                                *engine, ds.zero_optimization.offload_optimizer.delay_update, pipe.get(),
                                stage_seconds);
      }
      if (ds.memory_breakdown) PrintMemoryBreakdown(context.out, *engine, context.device, ds.zero_optimization.stage);
      std::fflush(context.out);
      window_start = Clock::now();
      window_steps = 0;
      forward_backward_seconds = step_seconds = overlapped_seconds = 0;
      pipeline_seconds = {};
    }
    if (eval_samples && step % job.train.eval_interval == 0) {
      torch::NoGradGuard no_grad;
      built->module->eval();
      double eval_loss = 0;
      const int64_t per_eval = ds.train_micro_batch_size_per_gpu * (data_group ? data_group->size() : 1);
      std::vector<TokenBatch> eval_batches;
      for (int64_t i = 0; i < job.train.eval_steps; ++i) {
        absl::Status read;
        TokenBatch batch = eval_samples->Load(sampler->MicroBatchIndices(i * per_eval, 0), context.device, &read);
        if (!read.ok()) return read;
        if (pipe) {
          eval_batches.push_back(std::move(batch));
        } else {
          eval_loss += model->BatchLoss(batch).item<double>() / job.train.eval_steps;
        }
      }
      if (pipe) {
        auto evaluated = pipe->EvalBatch(eval_batches);
        if (!evaluated.ok()) return evaluated.status();
        eval_loss = *evaluated;
      }
      eval_loss = MeanOverWorld(eval_loss, context);
      if (context.rank == 0) {
        absl::FPrintF(context.out, "eval step=%d loss=%.4f\n", step, eval_loss);
        std::fflush(context.out);
      }
      if (monitors) {
        DS_RETURN_IF_ERROR(monitors->Write({{monitor_metric::kEvalLoss, eval_loss, consumed}}, WallSeconds()));
      }
    }
    const bool at_interval = job.checkpoint.interval > 0 && step % job.checkpoint.interval == 0;
    if (!checkpoint_dir.empty() && (at_interval || step == job.train.steps)) {
      if (absl::Status saved = save(step); !saved.ok()) return saved;
      last_saved = step;
    }
    if (step == context.hang_at_step && context.attempt == 0 &&
        (context.hang_rank < 0 || context.hang_rank == context.rank)) {
      // Fault injection: stop making progress while staying alive.
      absl::FPrintF(context.out, "dsrank: hanging after step %d on purpose (--hang_at_step)\n", step);
      std::fflush(context.out);
      while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (summary.preempted) {
      if (!checkpoint_dir.empty() && last_saved != step) {
        if (absl::Status saved = save(step); !saved.ok()) return saved;
      }
      if (context.rank == 0) {
        absl::FPrintF(context.out, "dsrank: preempted after step %d; checkpoint %s\n", step,
                      checkpoint_dir.empty() ? std::string("not configured")
                                             : absl::StrCat(checkpoint_dir, "/global_step", step));
        std::fflush(context.out);
      }
      return absl::OkStatus();
    }
    if (step == context.exit_at_step && context.attempt == 0) {
      return absl::AbortedError(absl::StrCat("failing after step ", step, " on purpose (--exit_at_step)"));
    }
  }
  if (!export_options.folder.empty()) {
    if (absl::Status exported = checkpointer.ExportHuggingFace(export_options); !exported.ok()) return exported;
    if (context.rank == 0) {
      absl::FPrintF(context.out, "dsrank: exported the model as a Hugging Face folder: %s (%s%s)\n",
                    export_options.folder, job.export_.dtype, job.lora.r > 0 ? ", LoRA merged" : "");
    }
  }
  if (!adapter_options.folder.empty()) {
    if (absl::Status exported = checkpointer.ExportPeftAdapter(adapter_options); !exported.ok()) return exported;
    if (context.rank == 0) {
      absl::FPrintF(context.out, "dsrank: exported the LoRA adapter as a PEFT folder: %s (%s)\n",
                    adapter_options.folder, job.export_.dtype);
    }
  }
  if (comms_logger) comms_logger->PrintSummary();
  if (context.rank == 0) {
    absl::FPrintF(context.out, "dsrank: done: %d step(s), %d skipped (%d with a non-finite loss or gradient norm)\n",
                  engine->global_steps(), engine->skipped_steps(), engine->nonfinite_steps());
  }
  return absl::OkStatus();
}

}  // namespace

}  // namespace dslaunch::runtime

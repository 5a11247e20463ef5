#include "runtime/config/ds_config_schema.h"

#include "absl/strings/str_split.h"
#include "runtime/schedule/loss_scaler.h"
#include "runtime/schedule/lr_schedule.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/config/config_limits.h"
#include "runtime/config/ds_config_unbuilt_features.h"
#include "common/collective_op_names.h"

namespace dslaunch::runtime::config_internal {
namespace {

constexpr char kLRRangeTest[] = "LRRangeTest";
constexpr char kOneCycle[] = "OneCycle";
constexpr char kWarmupLR[] = "WarmupLR";
constexpr char kWarmupDecayLR[] = "WarmupDecayLR";
constexpr char kWarmupCosineLR[] = "WarmupCosineLR";

const std::vector<std::string> kPrecisionNames = {"fp32", "fp16", "bf16"};

// A scheduler parameter and the schedules that take it.
struct SchedulerParam {
  KeySpec spec;
  std::vector<std::string> schedules;
};

std::vector<SchedulerParam> SchedulerParams(SchedulerConfig* s) {
  const std::string p = "scheduler.params.";
  const std::vector<std::string> warmups = {kWarmupLR, kWarmupDecayLR, kWarmupCosineLR};
  return {
      {Key(p + "lr_range_test_min_lr", &s->lr_range_test_min_lr).Min(0), {kLRRangeTest}},
      {Key(p + "lr_range_test_step_size", &s->lr_range_test_step_size).Min(1), {kLRRangeTest}},
      {Key(p + "lr_range_test_step_rate", &s->lr_range_test_step_rate).Min(0), {kLRRangeTest}},
      {Key(p + "lr_range_test_staircase", &s->lr_range_test_staircase), {kLRRangeTest}},
      // OneCycle: cycle_min_lr and cycle_max_lr have no default in DeepSpeed.
      {Key(p + "cycle_min_lr", &s->cycle_min_lr).Min(0).Required(), {kOneCycle}},
      {Key(p + "cycle_max_lr", &s->cycle_max_lr).Min(0).Required(), {kOneCycle}},
      {Key(p + "decay_lr_rate", &s->decay_lr_rate).Min(0), {kOneCycle}},
      {Key(p + "cycle_first_step_size", &s->cycle_first_step_size).Min(1), {kOneCycle}},
      {Key(p + "cycle_second_step_size", &s->cycle_second_step_size).Min(1).Nullable(),
       {kOneCycle}},
      {Key(p + "cycle_first_stair_count", &s->cycle_first_stair_count).Min(0), {kOneCycle}},
      {Key(p + "cycle_second_stair_count", &s->cycle_second_stair_count).Min(0).Nullable(),
       {kOneCycle}},
      {Key(p + "decay_step_size", &s->decay_step_size).Min(0), {kOneCycle}},
      {Key(p + "cycle_momentum", &s->cycle_momentum), {kOneCycle}},
      {Key(p + "cycle_min_mom", &s->cycle_min_mom).Min(0), {kOneCycle}},
      {Key(p + "cycle_max_mom", &s->cycle_max_mom).Min(0), {kOneCycle}},
      {Key(p + "decay_mom_rate", &s->decay_mom_rate).Min(0), {kOneCycle}},
      {Key(p + "warmup_min_lr", &s->warmup_min_lr).Min(0).Auto(), {kWarmupLR, kWarmupDecayLR}},
      {Key(p + "warmup_max_lr", &s->warmup_max_lr).Min(0).Auto(), {kWarmupLR, kWarmupDecayLR}},
      {Key(p + "warmup_num_steps", &s->warmup_num_steps).Min(0).Auto(), warmups},
      {Key(p + "warmup_type", &s->warmup_type).OneOf({"log", "linear"}), warmups},
      {Key(p + "total_num_steps", &s->total_num_steps).Min(1).Auto().Required(),
       {kWarmupDecayLR, kWarmupCosineLR}},
      {Key(p + "warmup_min_ratio", &s->warmup_min_ratio).Min(0).Max(1), {kWarmupCosineLR}},
      {Key(p + "cos_min_ratio", &s->cos_min_ratio).Min(0).Max(1), {kWarmupCosineLR}},
      // Where a resumed schedule starts; checkpoints restore it here instead.
      {Unstored(p + "last_batch_iteration", ValueKind::kInt)
           .Min(-1)
           .RefusedUnless("-1", "starting a schedule part-way (checkpoints restore the step instead)"),
       {kLRRangeTest, kOneCycle, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR}},
  };
}

bool IsAdamFamily(const std::string& type) {
  return absl::EqualsIgnoreCase(type, "Adam") || absl::EqualsIgnoreCase(type, "AdamW");
}

// A scalar under `section`.`key` of the raw tree, or "" (const access never
// inserts into the tree).
std::string PeekScalar(const YAML::Node& root, const char* section, const char* key) {
  const YAML::Node& tree = root;
  if (!tree.IsDefined() || !tree.IsMap()) return "";
  const YAML::Node node = tree[section];
  if (!node.IsDefined() || !node.IsMap()) return "";
  const YAML::Node value = node[key];
  return value.IsDefined() && value.IsScalar() ? value.Scalar() : "";
}

// Why some of DeepSpeed's speed knobs, each under two names, have no effect here.
constexpr char kReleasedAfterUse[] = "ZeRO-3 here releases each gathered unit when its forward or backward ends";
constexpr char kOneSubmission[] = "io_uring here submits each batch of reads or writes at once";
constexpr char kAlwaysOverlapped[] = "NVMe swaps here always overlap reading, stepping and writing";
// How DeepSpeed's AutoTP rounds uneven slices.
constexpr char kWholeHeads[] =
    "tensor-parallel slices here are whole attention heads and even ranges of the MLP and the padded vocabulary";

void AddOffloadKeys(std::vector<KeySpec>* keys, const std::string& section, OffloadConfig* o,
                    bool for_optimizer) {
  const std::string p = section + ".";
  keys->push_back(Key(p + "device", &o->device).OneOf({"none", "cpu", "nvme"}));
  keys->push_back(Key(p + "nvme_path", &o->nvme_path).Nullable());
  // Note [Keys without effect here]: both are DeepSpeed's speed knobs.
  keys->push_back(Unstored(p + "pin_memory", ValueKind::kBool)
                      .IgnoredUnless("false", "offload's host buffers are always pinned when training on a GPU"));
  if (for_optimizer) {
    keys->push_back(Unstored(p + "buffer_count", ValueKind::kInt)
                        .Min(0)
                        .IgnoredUnless("4", "NVMe swaps here keep three buffer sets: one read ahead, one stepping, "
                                            "one written back (Note [NVMe offload])"));
  } else {
    // Note [Parameters on NVMe] (zero/zero_partition.h): two staging buffers
    // sized by the largest unit, and every piece on the drive.
    keys->push_back(Unstored(p + "buffer_count", ValueKind::kInt)
                        .Min(0)
                        .IgnoredUnless("5", "parameters on NVMe go through two staging buffers, each as large as the "
                                            "largest unit's piece (Note [Parameters on NVMe])"));
    keys->push_back(Unstored(p + "buffer_size", ValueKind::kInt)
                        .Min(0)
                        .IgnoredUnless("100000000", "parameters on NVMe go through two staging buffers, each as "
                                                    "large as the largest unit's piece (Note [Parameters on NVMe])"));
    // Note [Parameters on NVMe]: the first units' pieces that fit stay in
    // host memory; without device nvme, WithoutEffectHere says so.
    keys->push_back(Key(p + "max_in_cpu", &o->max_in_cpu).Min(0));
  }
  if (for_optimizer) {
    for (const char* name : {"pipeline_read", "pipeline_write"}) {
      keys->push_back(Unstored(p + name, ValueKind::kBool)
                          .IgnoredUnless("false", "NVMe swaps here always overlap reading, stepping and writing "
                                                  "(Note [NVMe offload])"));
    }
    keys->push_back(Unstored(p + "fast_init", ValueKind::kBool)
                        .IgnoredUnless("false", "how DeepSpeed first writes its NVMe swap files"));
    keys->push_back(Key(p + "ratio", &o->ratio).Min(0).Max(1));
    keys->push_back(Key(p + "delay_update", &o->delay_update));
    keys->push_back(Key(p + "delay_update_warmup_steps", &o->delay_update_warmup_steps).Min(0));
    keys->push_back(Unstored(p + "super_offload", ValueKind::kBool)
                        .IgnoredUnless("false", "DeepSpeed's SuperOffload speed path for Grace Hopper; "
                                                "delay_update is this runtime's overlap of the host step"));
    keys->push_back(Unstored(p + "convert_grad_on_cpu", ValueKind::kBool)
                        .IgnoredUnless("true", "where gradients are converted to fp32 is a speed choice"));
    keys->push_back(Unstored(p + "cpuadam_cores_perc", ValueKind::kNumber)
                        .Min(0)
                        .Max(1)
                        .IgnoredUnless("0.8", "set the CPU Adam's threads with DSLAUNCH_CPU_ADAM_THREADS"));
  }
}

void AddMonitorKeys(std::vector<KeySpec>* keys, const std::string& section, MonitorConfig* m) {
  keys->push_back(Key(section + ".enabled", &m->enabled));
  keys->push_back(Key(section + ".output_path", &m->output_path));
  keys->push_back(Key(section + ".job_name", &m->job_name));
}

// "key=value" for a not-yet-supported line.
std::string Setting(const std::string& key, const std::string& value) {
  return absl::StrCat(key, "=", value);
}

// Note [Keys without effect here]: the keys of class `unbuilt` given with a
// value other than DeepSpeed's default, each with "key=value" as written.
std::vector<std::pair<KeySpec, std::string>> GivenOtherThanDefault(const WalkResult& walk, const DsConfig& c,
                                                                   KeySpec::Unbuilt unbuilt) {
  DsConfig unused;
  std::vector<std::pair<KeySpec, std::string>> found;
  for (KeySpec& spec : DsConfigKeys(&unused, c.scheduler.type)) {
    // The walk keys what it saw by the canonical path (an alias's row is the
    // same key), and remembers the path as written.
    if (spec.unbuilt != unbuilt || !spec.canonical.empty() || !walk.Has(spec.path) || walk.IsAuto(spec.path)) {
      continue;
    }
    const WalkResult::Given& given = walk.given.at(spec.path);
    if (spec.IsDeepSpeedDefault(given.node)) continue;
    const std::string setting = Setting(given.path, given.node.IsScalar() ? given.node.Scalar() : "...");
    found.emplace_back(std::move(spec), setting);
  }
  return found;
}

// The paths of every `enabled: true` at any depth of `node` (at `path`).
std::vector<std::string> EnabledUnder(const YAML::Node& node, const std::string& path) {
  std::vector<std::string> found;
  if (!node.IsMap()) return found;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) continue;
    const std::string child = absl::StrCat(path, ".", entry.first.Scalar());
    bool on = false;
    if (entry.first.Scalar() == "enabled" && entry.second.IsScalar() && ParseBoolText(entry.second.Scalar(), &on) &&
        on) {
      found.push_back(child);
    }
    for (std::string& deeper : EnabledUnder(entry.second, child)) found.push_back(std::move(deeper));
  }
  return found;
}

bool GivenBool(const WalkResult& walk, const std::string& path, bool* value) {
  if (!walk.HasValue(path)) return false;
  const YAML::Node& node = walk.given.at(path).node;
  return node.IsScalar() && ParseBoolText(node.Scalar(), value);
}

}  // namespace

const std::vector<std::string>& SchedulerTypes() {
  static const auto* types = new std::vector<std::string>{kLRRangeTest, kOneCycle, kWarmupLR,
                                                          kWarmupDecayLR, kWarmupCosineLR};
  return *types;
}

const std::vector<std::string>& OptimizerTypes() {
  static const auto* types = new std::vector<std::string>{
      "Adam",   "AdamW",   "Adagrad", "Lamb",  "Lion",  "OneBitAdam", "ZeroOneAdam", "OneBitLamb",
      "MuAdam", "MuAdamW", "MuSGD",   "Muon",  "SGD",   "RMSprop",    "Adamax",      "NAdam",
      "RAdam"};
  return *types;
}

std::vector<KeySpec> DsConfigKeys(DsConfig* c, const std::string& scheduler_type) {
  std::vector<KeySpec> keys = {
      // Batch size: any two of the three decide the third (Note ["auto"]).
      Key("train_batch_size", &c->train_batch_size).Min(1).Max(kMaxGlobalBatchSize).Auto().Nullable(),
      Key("train_micro_batch_size_per_gpu", &c->train_micro_batch_size_per_gpu)
          .Min(1).Max(kMaxMicroBatchSize).Auto().Nullable(),
      Key("gradient_accumulation_steps", &c->gradient_accumulation_steps)
          .Min(1).Max(kMaxGradientAccumulationSteps).Auto().Nullable(),
      Key("gradient_clipping", &c->gradient_clipping).Min(0).Auto(),
      Key("steps_per_print", &c->steps_per_print).Min(1),
      Key("wall_clock_breakdown", &c->wall_clock_breakdown),
      Key("memory_breakdown", &c->memory_breakdown),
      Key("communication_data_type", &c->communication_data_type)
          .OneOf(kPrecisionNames).FoldCase().Nullable(),
      Key("prescale_gradients", &c->prescale_gradients),
      Key("gradient_predivide_factor", &c->gradient_predivide_factor).Above(0),
      Key("moe_expert_parallel_size", &c->moe_expert_parallel_size).Min(1),
      Unstored("sparse_gradients", ValueKind::kBool).RefusedUnless("false", "sparse gradient reduction"),
      Unstored("zero_allow_untested_optimizer", ValueKind::kBool)
          .IgnoredUnless("false", "the optimizers built here (Adam, AdamW) need no permission"),
      Unstored("zero_force_ds_cpu_optimizer", ValueKind::kBool)
          .IgnoredUnless("true", "the host optimizer of an offload is always this runtime's CPU Adam"),
      Unstored("dump_state", ValueKind::kBool)
          .IgnoredUnless("false", "dslaunch --validate prints the resolved configuration instead"),
      Unstored("disable_allgather", ValueKind::kBool)
          .IgnoredUnless("false", "how DeepSpeed gathers ZeRO-1/2 partitions is a speed choice; this runtime all-gathers"),
      Unstored("dataloader_drop_last", ValueKind::kBool)
          .IgnoredUnless("false", "it applies to DeepSpeed's deepspeed_io loader; dsrank's sampler reads its own data"),

      Key("fp16.enabled", &c->fp16.enabled).Auto(),
      Key("fp16.auto_cast", &c->fp16.auto_cast),
      Key("fp16.loss_scale", &c->fp16.loss_scale).Min(0),
      Key("fp16.initial_scale_power", &c->fp16.initial_scale_power).Min(0),
      Key("fp16.loss_scale_window", &c->fp16.loss_scale_window).Min(1),
      Key("fp16.hysteresis", &c->fp16.hysteresis).Min(1),
      Key("fp16.consecutive_hysteresis", &c->fp16.consecutive_hysteresis),
      Key("fp16.min_loss_scale", &c->fp16.min_loss_scale).Above(0),
      Unstored("fp16.fp16_master_weights_and_grads", ValueKind::kBool)
          .RefusedUnless("false", "fp16 master weights and gradients (without an fp32 master copy)"),
  };
  // bf16 and its legacy name "bfloat16" (DeepSpeed reads "bfloat16" when "bf16" is absent).
  for (const std::string section : {"bf16", "bfloat16"}) {
    const bool alias = section == "bfloat16";
    auto add = [&](KeySpec spec, const std::string& name) {
      if (alias) spec.AliasOf("bf16." + name);
      keys.push_back(std::move(spec));
    };
    add(Key(section + ".enabled", &c->bf16.enabled).Auto(), "enabled");
    add(Unstored(section + ".immediate_grad_update", ValueKind::kBool)
            .IgnoredUnless("false", "when bf16 gradients are added to the fp32 ones is a memory choice of DeepSpeed's "
                                   "BF16 optimizer; results agree"),
        "immediate_grad_update");
    add(Unstored(section + ".check_grad_overflow", ValueKind::kBool)
            .IgnoredUnless("true", "every step's loss and gradient norm are checked for non-finite values here, "
                                    "whatever the precision (Note [Non-finite guard])"),
        "check_grad_overflow");
    add(Unstored(section + ".bf16_master_weights_and_grads", ValueKind::kBool)
            .RefusedUnless("false", "bf16 master weights and gradients (without an fp32 master copy)"),
        "bf16_master_weights_and_grads");
    add(Unstored(section + ".bf16_optimizer_states", ValueKind::kBool)
            .RefusedUnless("false", "bf16 optimizer states"),
        "bf16_optimizer_states");
  }
  keys.insert(keys.end(), {
      // Apex AMP: DeepSpeed passes every other key to amp.initialize().
      Unstored("amp.enabled", ValueKind::kBool).RefusedUnless("false", "Apex AMP (use fp16 or bf16)"),
      Unstored("amp.opt_level", ValueKind::kString).Inert(),

      Key("optimizer.type", &c->optimizer.type).OneOf(OptimizerTypes()).FoldCase().Required(),
      Key("optimizer.params.lr", &c->optimizer.lr).Min(0).Auto(),
      Key("optimizer.params.betas", &c->optimizer.betas).Min(0).Below(1).Auto(),
      Key("optimizer.params.eps", &c->optimizer.eps).Min(0).Auto(),
      Key("optimizer.params.weight_decay", &c->optimizer.weight_decay).Min(0).Auto(),
      Key("optimizer.params.adam_w_mode", &c->optimizer.adam_w_mode),
      Unstored("optimizer.params.torch_adam", ValueKind::kBool)
          .IgnoredUnless("false", "which Adam kernel runs is a speed choice; this runtime's fused Adam computes "
                                  "torch.optim.AdamW's update"),
      Unstored("optimizer.params.bias_correction", ValueKind::kBool)
          .RefusedUnless("true", "Adam without bias correction"),
      Unstored("optimizer.params.amsgrad", ValueKind::kBool).RefusedUnless("false", "AMSGrad"),
      Unstored("optimizer.legacy_fusion", ValueKind::kBool)
          .IgnoredUnless("false", "a speed choice of DeepSpeed's fp16 optimizer"),

      Key("scheduler.type", &c->scheduler.type).OneOf(SchedulerTypes()).Required(),
  });
  const bool known_schedule =
      std::find(SchedulerTypes().begin(), SchedulerTypes().end(), scheduler_type) !=
      SchedulerTypes().end();
  for (SchedulerParam& param : SchedulerParams(&c->scheduler)) {
    bool applies = !known_schedule || std::find(param.schedules.begin(), param.schedules.end(),
                                                scheduler_type) != param.schedules.end();
    if (!applies) continue;
    // Without a known schedule nothing can be required of its parameters.
    if (!known_schedule) param.spec.required = false;
    keys.push_back(std::move(param.spec));
  }

  ZeroConfig* z = &c->zero_optimization;
  const std::string zp = "zero_optimization.";
  keys.insert(keys.end(), {
      Key(zp + "stage", &z->stage).OneOf({"0", "1", "2", "3"}),
      Unstored(zp + "contiguous_gradients", ValueKind::kBool)
          .IgnoredUnless("true", "gradients here are always reduced from contiguous buckets"),
      Key(zp + "reduce_scatter", &z->reduce_scatter),
      Key(zp + "reduce_bucket_size", &z->reduce_bucket_size).Min(0).Auto(),
      Unstored(zp + "use_multi_rank_bucket_allreduce", ValueKind::kBool)
          .IgnoredUnless("true", "how DeepSpeed buckets its all-reduce is a speed choice"),
      Unstored(zp + "allgather_partitions", ValueKind::kBool)
          .IgnoredUnless("true", "the updated partitions here are always all-gathered after the step"),
      Unstored(zp + "allgather_bucket_size", ValueKind::kInt)
          .Min(0)
          .IgnoredUnless("500000000", "the all-gather after the step here goes bucket by bucket of "
                                      "reduce_bucket_size, as the reduction does"),
      // null: DeepSpeed's default, true for stage 3 and false below.
      Key(zp + "overlap_comm", &z->overlap_comm).Nullable(),
      Unstored(zp + "load_from_fp32_weights", ValueKind::kBool)
          .RefusedUnless("true", "restoring the fp32 master from the 16-bit weights of a checkpoint"),
      Unstored(zp + "elastic_checkpoint", ValueKind::kBool)
          .IgnoredUnless("false", "checkpoints here load at any world size and ZeRO stage (Note [Reshardable checkpoints])"),
      Key(zp + "sub_group_size", &z->sub_group_size).Min(0),
      Unstored(zp + "round_robin_gradients", ValueKind::kBool)
          .IgnoredUnless("false", "the order DeepSpeed copies gradients to the host in is a speed choice"),
      // DeepSpeed's pydantic model takes each stage3_ key also under its field name.
      Key(zp + "stage3_prefetch_bucket_size", &z->stage3_prefetch_bucket_size).Min(0).Auto(),
      Key(zp + "prefetch_bucket_size", &z->stage3_prefetch_bucket_size).Min(0).Auto()
          .AliasOf(zp + "stage3_prefetch_bucket_size"),
      Key(zp + "stage3_param_persistence_threshold", &z->stage3_param_persistence_threshold)
          .Min(0).Auto(),
      Key(zp + "param_persistence_threshold", &z->stage3_param_persistence_threshold)
          .Min(0).Auto().AliasOf(zp + "stage3_param_persistence_threshold"),
      Unstored(zp + "stage3_model_persistence_threshold", ValueKind::kInt)
          .Min(0)
          .IgnoredUnless("9223372036854775807", "a ZeRO-3 memory and speed threshold of DeepSpeed's"),
      Unstored(zp + "model_persistence_threshold", ValueKind::kInt)
          .Min(0)
          .IgnoredUnless("9223372036854775807", "a ZeRO-3 memory and speed threshold of DeepSpeed's")
          .AliasOf(zp + "stage3_model_persistence_threshold"),
      Key(zp + "stage3_max_live_parameters", &z->stage3_max_live_parameters).Min(0),
      Key(zp + "max_live_parameters", &z->stage3_max_live_parameters).Min(0)
          .AliasOf(zp + "stage3_max_live_parameters"),
      Unstored(zp + "stage3_max_reuse_distance", ValueKind::kInt).Min(0).IgnoredUnless("1000000000", kReleasedAfterUse),
      Unstored(zp + "max_reuse_distance", ValueKind::kInt)
          .Min(0)
          .IgnoredUnless("1000000000", kReleasedAfterUse)
          .AliasOf(zp + "stage3_max_reuse_distance"),
      Key(zp + "stage3_gather_16bit_weights_on_model_save",
          &z->stage3_gather_16bit_weights_on_model_save),
      Key(zp + "gather_16bit_weights_on_model_save", &z->stage3_gather_16bit_weights_on_model_save)
          .AliasOf(zp + "stage3_gather_16bit_weights_on_model_save"),
      Key(zp + "stage3_gather_fp16_weights_on_model_save",
          &z->stage3_gather_16bit_weights_on_model_save)
          .AliasOf(zp + "stage3_gather_16bit_weights_on_model_save"),
      Unstored(zp + "stage3_module_granularity_threshold", ValueKind::kInt)
          .Min(0)
          .IgnoredUnless("0", "a ZeRO-3 speed threshold of DeepSpeed's (this runtime gathers one block at a time)"),
      Unstored(zp + "module_granularity_threshold", ValueKind::kInt)
          .Min(0)
          .IgnoredUnless("0", "a ZeRO-3 speed threshold of DeepSpeed's (this runtime gathers one block at a time)")
          .AliasOf(zp + "stage3_module_granularity_threshold"),
      Unstored(zp + "stage3_use_all_reduce_for_fetch_params", ValueKind::kBool)
          .IgnoredUnless("false", "how DeepSpeed fetches ZeRO-3 parameters is a speed choice"),
      Unstored(zp + "use_all_reduce_for_fetch_params", ValueKind::kBool)
          .IgnoredUnless("false", "how DeepSpeed fetches ZeRO-3 parameters is a speed choice")
          .AliasOf(zp + "stage3_use_all_reduce_for_fetch_params"),
      Unstored(zp + "ignore_unused_parameters", ValueKind::kBool)
          .RefusedUnless("true", "stopping on parameters that got no gradient"),
      Unstored(zp + "legacy_stage1", ValueKind::kBool)
          .IgnoredUnless("false", "DeepSpeed's old stage-1 code path; stage 1 here is one implementation"),
      Unstored(zp + "zero_hpz_partition_size", ValueKind::kInt)
          .Min(0)
          .RefusedUnless("1", "ZeRO++ hierarchical partitioning (hpZ)"),
      Unstored(zp + "zero_quantized_weights", ValueKind::kBool)
          .RefusedUnless("false", "ZeRO++ quantized weight communication (qwZ)"),
      Unstored(zp + "zero_quantized_nontrainable_weights", ValueKind::kBool)
          .RefusedUnless("false", "quantized frozen weights"),
      Unstored(zp + "zero_quantized_gradients", ValueKind::kBool)
          .RefusedUnless("false", "ZeRO++ quantized gradient communication (qgZ)"),
      Unstored(zp + "mics_shard_size", ValueKind::kInt).RefusedUnless("-1", "MiCS sharding"),
      Unstored(zp + "mics_hierarchical_params_gather", ValueKind::kBool).Inert(),
      Unstored(zp + "memory_efficient_linear", ValueKind::kBool)
          .IgnoredUnless("true", "a ZeRO-3 memory choice of DeepSpeed's linear layers"),
      Unstored(zp + "pipeline_loading_checkpoint", ValueKind::kBool)
          .IgnoredUnless("false", "how DeepSpeed loads ZeRO-3 checkpoints of pipeline modules"),
      Unstored(zp + "override_module_apply", ValueKind::kBool)
          .IgnoredUnless("true", "a ZeRO-3 hook of DeepSpeed's into torch.nn.Module.apply"),
      Unstored(zp + "log_trace_cache_warnings", ValueKind::kBool)
          .IgnoredUnless("false", "DeepSpeed's ZeRO-3 prefetch trace logging"),
  });
  AddOffloadKeys(&keys, zp + "offload_optimizer", &z->offload_optimizer, /*for_optimizer=*/true);
  AddOffloadKeys(&keys, zp + "offload_param", &z->offload_param, /*for_optimizer=*/false);

  ActivationCheckpointingConfig* a = &c->activation_checkpointing;
  const std::string ap = "activation_checkpointing.";
  AioConfig* aio = &c->aio;
  PipelineConfig* pipe = &c->pipeline;
  TensorParallelConfig* tp = &c->tensor_parallel;
  keys.insert(keys.end(), {
      Key(ap + "partition_activations", &a->partition_activations),
      Key(ap + "cpu_checkpointing", &a->cpu_checkpointing),
      Unstored(ap + "contiguous_memory_optimization", ValueKind::kBool)
          .IgnoredUnless("false", "where DeepSpeed puts checkpointed activations is a memory choice"),
      Key(ap + "number_checkpoints", &a->number_checkpoints).Min(1).Nullable(),
      Unstored(ap + "synchronize_checkpoint_boundary", ValueKind::kBool)
          .IgnoredUnless("false", "a device synchronization DeepSpeed adds for its timers"),
      Unstored(ap + "profile", ValueKind::kBool)
          .IgnoredUnless("false", "DeepSpeed's timers of activation checkpointing (see wall_clock_breakdown)"),

      // The seeds write the block inside zero_optimization; DeepSpeed reads it
      // at the top level. Both are accepted (DsConfig::aio_section says
      // which was read).
      Key(zp + "aio.block_size", &aio->block_size).Min(1).AliasOf("aio.block_size"),
      Key(zp + "aio.queue_depth", &aio->queue_depth).Min(1).AliasOf("aio.queue_depth"),
      Key(zp + "aio.thread_count", &aio->thread_count).Min(1).AliasOf("aio.thread_count"),
      Key(zp + "aio.intra_op_parallelism", &aio->thread_count).Min(1).AliasOf("aio.thread_count"),
      Unstored(zp + "aio.single_submit", ValueKind::kBool)
          .IgnoredUnless("false", kOneSubmission)
          .AliasOf("aio.single_submit"),
      Unstored(zp + "aio.overlap_events", ValueKind::kBool)
          .IgnoredUnless("true", kAlwaysOverlapped)
          .AliasOf("aio.overlap_events"),
      Key("aio.block_size", &aio->block_size).Min(1),
      Key("aio.queue_depth", &aio->queue_depth).Min(1),
      // "thread_count" before DeepSpeed 0.15, "intra_op_parallelism" since.
      Key("aio.thread_count", &aio->thread_count).Min(1),
      Key("aio.intra_op_parallelism", &aio->thread_count).Min(1).AliasOf("aio.thread_count"),
      // How DeepSpeed's aio library hands requests to the kernel; io_uring
      // here submits each sub-group's reads or writes as one batch and
      // overlaps them with the step (Note [NVMe offload]).
      Unstored("aio.single_submit", ValueKind::kBool).IgnoredUnless("false", kOneSubmission),
      Unstored("aio.overlap_events", ValueKind::kBool).IgnoredUnless("true", kAlwaysOverlapped),
      Unstored("aio.use_gds", ValueKind::kBool)
          .IgnoredUnless("false", "GPUDirect Storage is a speed path; swaps here go through host memory"),

      // "auto" (DeepSpeed's default) takes the stage count of the model: 1 here.
      Key("pipeline.stages", &pipe->stages).Min(1).Auto(),
      // PipelineModule's partition_method; "partition" is its ds_config name.
      Key("pipeline.partition_method", &pipe->partition_method)
          .OneOf({"parameters", "uniform", "type:*"}),
      Key("pipeline.partition", &pipe->partition_method)
          .OneOf({"parameters", "uniform", "type:*"}).AliasOf("pipeline.partition_method"),
      Key("pipeline.layers_per_stage", &pipe->layers_per_stage).Min(1),
      Key("pipeline.schedule", &pipe->schedule).OneOf({"1f1b", "interleaved", "gpipe"}),
      Key("pipeline.virtual_stages", &pipe->virtual_stages).Min(1),
      Key("pipeline.num_layers_per_virtual_stage", &pipe->num_layers_per_virtual_stage).Min(0),
      Unstored("pipeline.seed_layers", ValueKind::kBool).RefusedUnless("false", "seeding each pipeline layer"),
      Key("pipeline.activation_checkpoint_interval", &pipe->activation_checkpoint_interval).Min(0),
      BoolOrAuto("pipeline.pipe_partitioned", &pipe->pipe_partitioned),
      BoolOrAuto("pipeline.grad_partitioned", &pipe->grad_partitioned),

      // DeepSpeed's AutoTP training config: autotp_size, or tp {tp_size, tp_grain_size};
      // the flat tp_size / tp_grain_size / mpu are dslaunch's shorthand.
      Unstored("tensor_parallel.autotp_size", ValueKind::kInt).Min(0).ReadByLoader(),
      Key("tensor_parallel.tp_size", &tp->tp_size).Min(1),
      Unstored("tensor_parallel.tp_grain_size", ValueKind::kInt).Min(1).IgnoredUnless("1", kWholeHeads),
      Key("tensor_parallel.mpu", &tp->mpu).Nullable(),
      Key("tensor_parallel.tp.tp_size", &tp->tp_size).Min(1).AliasOf("tensor_parallel.tp_size"),
      Unstored("tensor_parallel.tp.tp_grain_size", ValueKind::kInt)
          .Min(1)
          .IgnoredUnless("1", kWholeHeads)
          .AliasOf("tensor_parallel.tp_grain_size"),
      // DeepSpeed's field name for the `tp` block.
      Key("tensor_parallel.tensor_parallel.tp_size", &tp->tp_size).Min(1).AliasOf("tensor_parallel.tp_size"),
      Unstored("tensor_parallel.tensor_parallel.tp_grain_size", ValueKind::kInt)
          .Min(1)
          .IgnoredUnless("1", kWholeHeads)
          .AliasOf("tensor_parallel.tp_grain_size"),
      Unstored("tensor_parallel.tp_overlap_comm", ValueKind::kBool)
          .IgnoredUnless("false", "DeepSpeed's AutoTP overlap is a speed choice"),
      Unstored("tensor_parallel.keep_module_on_host", ValueKind::kBool)
          .IgnoredUnless("false", "where DeepSpeed's AutoTP keeps the unsharded module while it loads"),

      Key("moe.enabled", &c->moe.enabled),
      Key("moe.ep_size", &c->moe.ep_size).Min(1),
  });
  AddMonitorKeys(&keys, "tensorboard", &c->tensorboard);
  AddMonitorKeys(&keys, "csv_monitor", &c->csv_monitor);
  FlopsProfilerConfig* f = &c->flops_profiler;
  keys.insert(keys.end(), {
      Key("wandb.enabled", &c->wandb.enabled),
      Unstored("wandb.team", ValueKind::kString).Nullable().Inert(),
      Unstored("wandb.group", ValueKind::kString).Nullable().Inert(),
      Unstored("wandb.project", ValueKind::kString).Inert(),

      Key("flops_profiler.enabled", &f->enabled),
      Unstored("flops_profiler.recompute_fwd_factor", ValueKind::kNumber).Min(0).Inert(),
      Key("flops_profiler.profile_step", &f->profile_step).Min(1),
      Key("flops_profiler.module_depth", &f->module_depth).Min(-1),
      Key("flops_profiler.top_modules", &f->top_modules).Min(1),
      Key("flops_profiler.detailed", &f->detailed),
      Key("flops_profiler.output_file", &f->output_file).Nullable(),

      // Note [Comms logger] (runtime/comm/comms_logger.h).
      Key("comms_logger.enabled", &c->comms_logger.enabled),
      Key("comms_logger.verbose", &c->comms_logger.verbose),
      Key("comms_logger.prof_all", &c->comms_logger.prof_all),
      Key("comms_logger.prof_ops", &c->comms_logger.prof_ops),
      Unstored("comms_logger.debug", ValueKind::kBool)
          .IgnoredUnless("false", "DeepSpeed adds the calling Python function to each line; each line here names "
                                  "the op's process group"),

      Unstored("data_types.grad_accum_dtype", ValueKind::kString)
          .OneOf(kPrecisionNames).FoldCase().Nullable()
          .RefusedUnless("", "a gradient accumulation type other than the gradients' own"),
      Unstored("checkpoint.tag_validation", ValueKind::kString)
          .OneOf({"Ignore", "Warn", "Fail"}).FoldCase()
          .IgnoredUnless("Warn", "a checkpoint here is committed only once every rank wrote the same tag "
                                 "(Note [Committed checkpoints])"),
      Unstored("checkpoint.load_universal", ValueKind::kBool)
          .RefusedUnless("false", "loading DeepSpeed's universal checkpoints (this runtime's own reshard at any "
                                  "world size; dsconsolidate exports safetensors)"),
      Unstored("checkpoint.use_node_local_storage", ValueKind::kBool)
          .RefusedUnless("false", "checkpoints on node-local storage"),
      Unstored("checkpoint.parallel_write.pipeline_stage", ValueKind::kBool)
          .IgnoredUnless("false", "every rank here writes its own files in parallel already"),
  });
  AddKeysOfFeaturesNotBuilt(&keys);
  return keys;
}

std::vector<std::string> DsConfigOpenSections() {
  std::vector<std::string> sections = {"amp", "zero_optimization.zeropp_loco_param"};
  for (const OpenFeatureSection& open : OpenSectionsOfFeaturesNotBuilt()) sections.push_back(open.section);
  return sections;
}

WalkResult WalkDsConfig(const YAML::Node& root, const TreeSource& source, DsConfig* config,
                        Problems* problems) {
  const std::string scheduler_type = PeekScalar(root, "scheduler", "type");
  const std::string optimizer_type = PeekScalar(root, "optimizer", "type");
  SchemaWalker walker(DsConfigKeys(config, scheduler_type));

  for (const std::string& section : DsConfigOpenSections()) walker.AllowAnyKeysUnder(section);
  // Parameters of optimizers not built here go to them unchecked, as DeepSpeed
  // passes them to the optimizer's constructor.
  if (!optimizer_type.empty() && !IsAdamFamily(optimizer_type)) {
    walker.AllowAnyKeysUnder("optimizer.params");
  }
  walker.AddMisplacedKey("optimizer.params.max_grad_norm",
                         "is not an optimizer parameter (DeepSpeed refuses it); use the top-level "
                         "gradient_clipping");
  const auto& schedules = SchedulerTypes();
  if (std::find(schedules.begin(), schedules.end(), scheduler_type) != schedules.end()) {
    SchedulerConfig unused;
    for (const SchedulerParam& param : SchedulerParams(&unused)) {
      const auto& takers = param.schedules;
      if (std::find(takers.begin(), takers.end(), scheduler_type) != takers.end()) continue;
      walker.AddMisplacedKey(param.spec.path, absl::StrCat("is not a parameter of ", scheduler_type,
                                                           " (it is one of ",
                                                           absl::StrJoin(takers, ", "), ")"));
    }
  }
  return walker.Walk(root, source, problems);
}

void FinishDsConfig(const WalkResult& walk, const TreeSource& source, DsConfig* c,
                    Problems* problems) {
  auto problem_at = [&](const std::string& path, absl::string_view what) {
    problems->AtKey(source, walk.WrittenPath(path), walk.MarkOf(path), what);
  };

  c->optimizer.present = walk.Has("optimizer");
  // DeepSpeed: type AdamW always decouples weight decay; Adam does unless adam_w_mode is false.
  if (absl::EqualsIgnoreCase(c->optimizer.type, "AdamW")) c->optimizer.adam_w_mode = true;

  if (!walk.HasValue("zero_optimization.overlap_comm")) {
    c->zero_optimization.overlap_comm = c->zero_optimization.stage == 3;
  }
  if (c->zero_optimization.offload_optimizer.ratio < 1.0 && c->zero_optimization.stage != 3 &&
      walk.HasValue("zero_optimization.offload_optimizer.ratio")) {
    problem_at("zero_optimization.offload_optimizer.ratio",
               absl::StrCat(FormatNumber(c->zero_optimization.offload_optimizer.ratio),
                            ": partial offload needs zero_optimization.stage 3 (DeepSpeed)"));
  }

  // Which aio block was read: DeepSpeed's top-level one, or the seeds' one
  // inside zero_optimization (the same keys; the engine says which).
  for (const char* key : {"block_size", "queue_depth", "thread_count", "single_submit", "overlap_events"}) {
    const std::string canonical = absl::StrCat("aio.", key);
    if (walk.Has(canonical) && absl::StartsWith(walk.WrittenPath(canonical), "zero_optimization.")) {
      c->aio_section = "zero_optimization.aio";
    }
  }

  // AutoTP: autotp_size > 0 is the tensor-parallel degree (0: off).
  if (walk.HasValue("tensor_parallel.autotp_size")) {
    int64_t autotp = 0;
    ParseIntegerText(walk.given.at("tensor_parallel.autotp_size").node.Scalar(), &autotp);
    if (autotp > 0) {
      if (walk.HasValue("tensor_parallel.tp_size") && c->tensor_parallel.tp_size != autotp) {
        problem_at("tensor_parallel.autotp_size",
                   absl::StrCat(autotp, " disagrees with ", source.key_prefix,
                                walk.WrittenPath("tensor_parallel.tp_size"), " (",
                                c->tensor_parallel.tp_size, ")"));
      } else {
        c->tensor_parallel.tp_size = static_cast<int>(autotp);
      }
    }
  }
}

void CheckResolvedDsConfig(const WalkResult& walk, const TreeSource& source, const DsConfig& c,
                           Problems* problems) {
  if (c.fp16.enabled && c.bf16.enabled) {
    problems->AtKey(source, walk.WrittenPath("bf16.enabled"), walk.MarkOf("bf16.enabled"),
                    absl::StrCat("fp16 and bf16 are both enabled (", source.key_prefix,
                                 "fp16.enabled is true too); enable one of them"));
  }
  // The numbers the engine will run with must make sense together too: the
  // schedule and the loss scaler validate themselves (runtime/schedule), so
  // --validate reports what would otherwise fail when the ranks start. Only
  // for an otherwise clean config, so that one mistake is not reported twice.
  const bool clean = problems->empty();
  if (clean && !c.scheduler.type.empty()) {
    auto schedule = MakeLrSchedule(c.scheduler, c.optimizer.lr);
    if (!schedule.ok()) {
      for (absl::string_view line : absl::StrSplit(schedule.status().message(), '\n')) {
        problems->AtKey(source, walk.WrittenPath("scheduler"), walk.MarkOf("scheduler"), std::string(line));
      }
    }
  }
  if (clean && c.fp16.enabled) {
    absl::Status scaler = LossScaler::Validate(c.fp16);
    if (!scaler.ok()) {
      problems->AtKey(source, walk.WrittenPath("fp16"), walk.MarkOf("fp16"), std::string(scaler.message()));
    }
  }
  // Note [Mixture of experts]: the expert-parallel size, said once.
  if (c.moe_expert_parallel_size > 1 && c.moe.enabled && c.moe.ep_size > 1 &&
      c.moe.ep_size != c.moe_expert_parallel_size) {
    problems->AtKey(source, walk.WrittenPath("moe.ep_size"), walk.MarkOf("moe.ep_size"),
                    absl::StrCat(c.moe.ep_size, " disagrees with moe_expert_parallel_size=", c.moe_expert_parallel_size,
                                 "; write one of them"));
  }
  if (!c.moe.enabled && c.moe.ep_size > 1) {
    problems->AtKey(source, walk.WrittenPath("moe.ep_size"), walk.MarkOf("moe.ep_size"),
                    absl::StrCat(c.moe.ep_size,
                                 " without moe.enabled: true (write moe.enabled: true, or "
                                 "moe_expert_parallel_size)"));
  }
  if (ExpertParallelSize(c) > 1 && c.zero_optimization.stage == 3) {
    problems->AtKey(source, walk.WrittenPath("zero_optimization.stage"), walk.MarkOf("zero_optimization.stage"),
                    absl::StrCat("3 with expert parallelism (", ExpertParallelSize(c),
                                 "): ZeRO-3 gathers each block over the data-parallel "
                                 "group, but the experts differ "
                                 "across the expert-parallel group; use stage 1 or 2 (the "
                                 "experts' optimizer state "
                                 "is partitioned over the expert-data-parallel group)"));
  }
  if (c.zero_optimization.offload_optimizer.device != "none" && c.zero_optimization.stage == 0) {
    problems->AtKey(source, walk.WrittenPath("zero_optimization.offload_optimizer.device"),
                    walk.MarkOf("zero_optimization.offload_optimizer.device"),
                    absl::StrCat("offload_optimizer.device=", c.zero_optimization.offload_optimizer.device,
                                 " partitions the optimizer: it needs "
                                 "zero_optimization.stage 1, 2 or 3"));
  }
  if (c.zero_optimization.offload_optimizer.device == "nvme" && c.zero_optimization.offload_optimizer.nvme_path.empty()) {
    problems->AtKey(source, walk.WrittenPath("zero_optimization.offload_optimizer.device"),
                    walk.MarkOf("zero_optimization.offload_optimizer.device"),
                    "offload_optimizer.device=nvme needs offload_optimizer.nvme_path: a folder on an NVMe drive of "
                    "every host, where each rank keeps its swap files");
  }
  if (c.zero_optimization.offload_param.device == "nvme" && c.zero_optimization.offload_param.nvme_path.empty()) {
    problems->AtKey(source, walk.WrittenPath("zero_optimization.offload_param.device"),
                    walk.MarkOf("zero_optimization.offload_param.device"),
                    "offload_param.device=nvme needs offload_param.nvme_path: a folder on an NVMe drive of every "
                    "host, where each rank keeps its parameter files");
  }
  if (c.zero_optimization.offload_param.device == "nvme" && c.zero_optimization.offload_optimizer.delay_update) {
    problems->AtKey(source, walk.WrittenPath("zero_optimization.offload_optimizer.delay_update"),
                    walk.MarkOf("zero_optimization.offload_optimizer.delay_update"),
                    "delay_update runs the host step while the next forward reads the parameters: it cannot be "
                    "combined with offload_param.device=nvme, where both would use the parameter files (use "
                    "offload_param.device=cpu)");
  }
  if (c.zero_optimization.offload_optimizer.delay_update && c.zero_optimization.offload_optimizer.device != "cpu") {
    problems->AtKey(source, walk.WrittenPath("zero_optimization.offload_optimizer.delay_update"),
                    walk.MarkOf("zero_optimization.offload_optimizer.delay_update"),
                    absl::StrCat("delay_update overlaps the host optimizer step with the next forward and backward: "
                                 "it needs offload_optimizer.device=cpu (it is ",
                                 c.zero_optimization.offload_optimizer.device, ")"));
  }
  if (c.zero_optimization.offload_optimizer.delay_update_warmup_steps > 0 &&
      !c.zero_optimization.offload_optimizer.delay_update) {
    problems->AtKey(source, walk.WrittenPath("zero_optimization.offload_optimizer.delay_update_warmup_steps"),
                    walk.MarkOf("zero_optimization.offload_optimizer.delay_update_warmup_steps"),
                    "delay_update_warmup_steps counts the plain steps before the delayed update begins: it has no "
                    "effect without delay_update: true");
  }
  if (c.zero_optimization.offload_param.device != "none" && c.zero_optimization.stage != 3) {
    problems->AtKey(source, walk.WrittenPath("zero_optimization.offload_param.device"),
                    walk.MarkOf("zero_optimization.offload_param.device"),
                    absl::StrCat("offload_param.device=", c.zero_optimization.offload_param.device,
                                 " offloads partitioned parameters: it needs zero_optimization.stage 3"));
  }
  for (const std::string& op : c.comms_logger.prof_ops) {
    if (CanonicalCollectiveName(op).empty()) {
      problems->AtKey(source, walk.WrittenPath("comms_logger.prof_ops"), walk.MarkOf("comms_logger.prof_ops"),
                      absl::StrCat("'", op, "' is not a collective (all_reduce, all_gather, reduce_scatter, "
                                   "all_to_all, broadcast, send, recv, send_recv, barrier, or DeepSpeed's names of "
                                   "them such as all_gather_into_tensor)"));
    }
  }
  bool amp = false;
  // Note [Monitor metrics] (runtime/monitor/training_monitors.h): the
  // tensorboard and csv_monitor files are written; W&B's run format is its
  // own, and its service is not reached from here.
  if (c.wandb.enabled) {
    problems->AtKey(source, "wandb.enabled", walk.MarkOf("wandb.enabled"),
                    "dslaunch does not write W&B runs; set tensorboard.enabled instead and upload its event files "
                    "with `wandb sync --sync-tensorboard FOLDER` (or use csv_monitor)");
  }
  if (GivenBool(walk, "amp.enabled", &amp) && amp && (c.fp16.enabled || c.bf16.enabled)) {
    problems->AtKey(source, "amp.enabled", walk.MarkOf("amp.enabled"),
                    absl::StrCat("amp cannot be combined with ", c.fp16.enabled ? "fp16" : "bf16",
                                 " (DeepSpeed refuses it)"));
  }
}

std::vector<std::string> NotYetSupported(const WalkResult& walk, const DsConfig& c) {
  std::vector<std::string> lines;
  auto add = [&](const std::string& setting, absl::string_view what) {
    lines.push_back(absl::StrCat(setting, ": ", what, " is not yet supported"));
  };
  // CPU and NVMe offload are built for the optimizer (stages 1-3, Note
  // [NVMe offload]) and the parameters (stage 3, Note [Parameters on NVMe]).
  if (c.pipeline.pipe_partitioned == "true" || c.pipeline.grad_partitioned == "true") {
    add(Setting(c.pipeline.pipe_partitioned == "true" ? "pipeline.pipe_partitioned" : "pipeline.grad_partitioned",
                "true"),
        "partitioning the tensors sent between stages over the tensor group");
  }
  // number_checkpoints, cpu_checkpointing and partition_activations are
  // built (Note [Partitioned activations]).
  if (!IsAdamFamily(c.optimizer.type)) {
    add(Setting("optimizer.type", c.optimizer.type),
        absl::StrCat("the ", c.optimizer.type, " optimizer (Adam and AdamW are built)"));
  }
  // Note [Flops profiler] (runtime/dsrank/flops_profiler.h): built for ZeRO 0-3 without pipeline stages.
  if (c.flops_profiler.enabled && c.pipeline.stages > 1) {
    add(Setting("flops_profiler.enabled", "true"), "the flops profiler with pipeline stages");
  }
  if (!c.communication_data_type.empty()) {
    add(Setting("communication_data_type", c.communication_data_type),
        "communicating gradients in a type other than their own");
  }
  if (c.prescale_gradients) add(Setting("prescale_gradients", "true"), "gradient prescaling");
  // Note [Keys without effect here]: every key DeepSpeed reads that would
  // change what is computed here.
  for (const auto& [spec, setting] : GivenOtherThanDefault(walk, c, KeySpec::Unbuilt::kRefused)) {
    add(setting, spec.unbuilt_what);
  }
  for (const OpenFeatureSection& open : OpenSectionsOfFeaturesNotBuilt()) {
    if (!walk.Has(open.section)) continue;
    for (const std::string& path : EnabledUnder(walk.given.at(open.section).node, walk.WrittenPath(open.section))) {
      add(Setting(path, "true"), open.feature);
    }
  }
  return lines;
}

std::vector<std::string> WithoutEffectHere(const WalkResult& walk, const DsConfig& c) {
  std::vector<std::string> lines;
  // DeepSpeed's templates carry max_in_cpu beside device cpu: a warning, not
  // a refusal.
  const std::string max_in_cpu = "zero_optimization.offload_param.max_in_cpu";
  if (walk.Has(max_in_cpu) && !walk.IsAuto(max_in_cpu) && c.zero_optimization.offload_param.device != "nvme") {
    lines.push_back(absl::StrCat(Setting(walk.WrittenPath(max_in_cpu),
                                         absl::StrCat(c.zero_optimization.offload_param.max_in_cpu)),
                                 " has no effect here: it counts the parameter elements kept in host memory with "
                                 "offload_param.device=nvme (it is ",
                                 c.zero_optimization.offload_param.device, ")"));
  }
  for (const auto& [spec, setting] : GivenOtherThanDefault(walk, c, KeySpec::Unbuilt::kIgnored)) {
    lines.push_back(absl::StrCat(setting, " has no effect here (DeepSpeed's default is ",
                                 spec.deepspeed_default.empty() ? "none" : spec.deepspeed_default, "): ",
                                 spec.unbuilt_what));
  }
  return lines;
}

}  // namespace dslaunch::runtime::config_internal

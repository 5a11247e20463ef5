#include "runtime/config/ds_config_unbuilt_features.h"

namespace dslaunch::runtime::config_internal {
namespace {

// A feature's block: `switch_key` (under `section`) refused when it is not
// `off`; every other key of the block inert.
void AddFeature(std::vector<KeySpec>* keys, const std::string& section, const std::string& switch_key,
                const std::string& off, ValueKind switch_kind, const std::string& feature,
                const std::vector<std::string>& parameters) {
  keys->push_back(Unstored(section + "." + switch_key, switch_kind).RefusedUnless(off, feature));
  for (const std::string& name : parameters) keys->push_back(Unstored(section + "." + name, ValueKind::kAny).Inert());
}

}  // namespace

void AddKeysOfFeaturesNotBuilt(std::vector<KeySpec>* keys) {
  const ValueKind kBool = ValueKind::kBool;
  AddFeature(keys, "autotuning", "enabled", "false", kBool,
             "DeepSpeed's autotuning (dslaunch estimate --gpu_memory_gib finds the largest micro batch that fits)",
             {"end_profile_step", "exps_dir", "fast", "max_train_batch_size", "max_train_micro_batch_size_per_gpu",
              "metric", "metric_path", "min_train_batch_size", "min_train_micro_batch_size_per_gpu",
              "model_info.hidden_size", "model_info.num_layers", "model_info.num_params", "model_info.profile",
              "model_info_path", "mp_size", "num_tuning_micro_batch_sizes", "overwrite", "results_dir",
              "start_profile_step", "tuner_early_stopping", "tuner_num_trials", "tuner_type"});
  AddFeature(keys, "comet", "enabled", "false", kBool, "Comet logging (tensorboard and csv_monitor are written)",
             {"api_key", "experiment_key", "experiment_name", "mode", "online", "project", "samples_log_interval",
              "workspace"});
  AddFeature(keys, "compile", "deepcompile", "false", kBool, "DeepCompile",
             {"debug_log", "double_buffer", "free_activation", "free_activation_threshold", "keep_all_input_tensors",
              "keep_int_input_tensors", "offload_activation", "offload_activation_pin_memory", "offload_opt_states",
              "offload_parameters", "passes", "symmetric_memory", "sync_after_allgather", "sync_after_reduce",
              "sync_before_allgather", "sync_before_reduce"});
  AddFeature(keys, "curriculum_learning", "enabled", "false", kBool, "curriculum learning",
             {"curriculum_type", "max_difficulty", "min_difficulty", "schedule_type"});
  AddFeature(keys, "elasticity", "enabled", "false", kBool,
             "DeepSpeed elasticity's batch search (--min_nodes gives elastic membership here)",
             {"ignore_non_elastic_batch_info", "max_gpus", "max_train_batch_size", "micro_batch_sizes", "min_gpus",
              "min_time", "model_parallel_size", "num_gpus_per_node", "prefer_larger_batch", "version"});
  AddFeature(keys, "expert_parallel", "enabled", "false", kBool,
             "DeepSpeed's AutoEP (moe.enabled and moe_expert_parallel_size build experts here)",
             {"autoep_size", "combine_impl", "disable_triton_grouped_mm", "expert_pattern",
              "expert_tensor_parallel_size", "expert_w1", "expert_w2", "expert_w3", "has_shared_experts",
              "load_balance_coeff", "moe_layer_pattern", "num_expert_groups", "num_experts_attr", "num_limited_groups",
              "preset_model", "route_norm", "route_scale", "routed_scaling_factor", "router_pattern", "score_apply",
              "score_func", "shared_experts_gate_pattern", "shared_experts_pattern", "top_k", "top_k_attr",
              "use_grouped_mm", "validate_folding_routing"});
  AddFeature(keys, "hybrid_engine", "enabled", "false", kBool, "DeepSpeed's hybrid engine (RLHF generation)",
             {"enable_cuda_graph", "inference_tp_size", "max_out_tokens", "pin_parameters", "release_inference_cache",
              "tp_gather_partition_size"});
  AddFeature(keys, "nebula", "enabled", "false", kBool, "Nebula checkpointing",
             {"enable_nebula_load", "nebula_load_path", "num_of_version_in_retention", "persistent_storage_path",
              "persistent_time_interval"});
  AddFeature(keys, "progressive_layer_drop", "enabled", "false", kBool, "progressive layer drop", {"gamma", "theta"});
  AddFeature(keys, "quantize_training.eigenvalue", "enabled", "false", kBool, "the eigenvalue computation",
             {"gas_boundary_resolution", "layer_name", "layer_num", "max_iter", "stability", "tol", "verbose"});
  AddFeature(keys, "torch_autocast", "enabled", "false", kBool, "torch.autocast mixed precision (use bf16 or fp16)",
             {"dtype", "lower_precision_safe_modules"});
  AddFeature(keys, "weight_quantization", "enabled", "false", kBool, "weight quantization",
             {"num_bits", "q_groups", "q_type"});

  keys->insert(keys->end(), {
      // Blocks whose presence turns a feature on.
      Unstored("datastates_ckpt", ValueKind::kAny).RefusedUnless("", "DataStates asynchronous checkpointing"),
      Unstored("sparse_attention", ValueKind::kAny).RefusedUnless("", "sparse attention"),
      Unstored("zero_optimization.zenflow", ValueKind::kAny).RefusedUnless("", "ZenFlow"),
      Unstored("checkpoint.writer", ValueKind::kAny).RefusedUnless("", "DeepSpeed's fast checkpoint writers"),
      Unstored("tensor_parallel.partition_config", ValueKind::kAny)
          .RefusedUnless("", "AutoTP partition specs (the model's own layers decide its tensor-parallel cut here)"),

      Unstored("gradient_allreduce_op", ValueKind::kString)
          .OneOf({"mean", "sum"})
          .FoldCase()
          .RefusedUnless("mean", "summing gradients over the ranks instead of averaging them"),
      Unstored("sequence_parallel_size", ValueKind::kInt)
          .Min(1)
          .RefusedUnless("1", "DeepSpeed-Ulysses sequence parallelism"),
      Unstored("use_data_before_expert_parallelism", ValueKind::kBool)
          .RefusedUnless("false", "the data-before-expert parallel layout"),
      Unstored("managed_gradient_accumulation", ValueKind::kBool)
          .RefusedUnless("true", "gradient accumulation the caller manages"),
      Unstored("data_types.param_dtype", ValueKind::kString).RefusedUnless("", "a parameter type of its own"),
      Unstored("data_types.buffer_dtype", ValueKind::kString).RefusedUnless("", "a buffer type of its own"),
      Unstored("tensor_parallel.kernel_inject", ValueKind::kBool).RefusedUnless("false", "AutoTP kernel injection"),
      Unstored("tensor_parallel.replace_with_kernel_inject", ValueKind::kBool)
          .RefusedUnless("false", "AutoTP kernel injection"),
      Unstored("tensor_parallel.injection_policy_tuple", ValueKind::kAny)
          .RefusedUnless("", "AutoTP injection policies"),
      Unstored("tensor_parallel.preset_model", ValueKind::kString).RefusedUnless("", "AutoTP preset models"),
      Unstored("zero_optimization.cpu_offload", ValueKind::kBool)
          .RefusedUnless("false", "the deprecated cpu_offload key (write offload_optimizer: {device: cpu})"),
      Unstored("zero_optimization.cpu_offload_param", ValueKind::kBool)
          .RefusedUnless("false", "the deprecated cpu_offload_param key (write offload_param: {device: cpu})"),
      Unstored("zero_optimization.cpu_offload_use_pin_memory", ValueKind::kBool)
          .RefusedUnless("false", "the deprecated cpu_offload_use_pin_memory key (write offload_optimizer: "
                                  "{device: cpu}: offload's host buffers are pinned on a GPU)"),

      // Speed, memory and logging knobs of DeepSpeed's own code.
      Unstored("graph_harvesting", ValueKind::kBool)
          .IgnoredUnless("false", "CUDA graph harvesting is a speed path of DeepSpeed's kernels"),
      Unstored("seq_parallel_communication_data_type", ValueKind::kString)
          .IgnoredUnless("fp32", "it applies to sequence parallelism, which is refused"),
      Unstored("data_parallel_size", ValueKind::kInt)
          .IgnoredUnless("", "the data-parallel size here follows from the world size, tensor_parallel.tp_size and "
                             "pipeline.stages"),
      Unstored("log_level", ValueKind::kString).IgnoredUnless("", "dslaunch's and dsrank's output is their own"),
      Unstored("timers.throughput.enabled", ValueKind::kBool)
          .IgnoredUnless("true", "dsrank always prints tokens/s at each steps_per_print"),
      Unstored("timers.throughput.synchronized", ValueKind::kBool)
          .IgnoredUnless("true", "dsrank's timings always wait for the device"),
      Unstored("pipeline.use_reentrant", ValueKind::kBool)
          .IgnoredUnless("true", "activation checkpointing here has one implementation"),
      Unstored("checkpoint.checkpoint_serialization", ValueKind::kBool)
          .IgnoredUnless("true", "checkpoints here are written in their own format (Note [Reshardable checkpoints])"),
      Unstored("tensor_parallel.dtype", ValueKind::kString)
          .IgnoredUnless("", "the precision here is fp16.enabled or bf16.enabled"),
      Unstored("tensor_parallel.tp.mpu", ValueKind::kAny).Inert(),
      Unstored("tensor_parallel.tp.tp_group", ValueKind::kAny).Inert(),
      Unstored("tensor_parallel.tensor_parallel.mpu", ValueKind::kAny).Inert(),
      Unstored("tensor_parallel.tensor_parallel.tp_group", ValueKind::kAny).Inert(),
      Unstored("zero_optimization.enable_sanity_checks", ValueKind::kBool)
          .IgnoredUnless("false", "DeepSpeed's internal ZeRO checks"),
      Unstored("zero_optimization.stage3_allgather_sequential", ValueKind::kBool)
          .IgnoredUnless("false", "how DeepSpeed orders its ZeRO-3 all-gathers is a speed choice"),
      Unstored("zero_optimization.allgather_sequential", ValueKind::kBool)
          .IgnoredUnless("false", "how DeepSpeed orders its ZeRO-3 all-gathers is a speed choice"),
      Unstored("zero_optimization.leaf_module", ValueKind::kAny)
          .IgnoredUnless("", "ZeRO-3 here gathers each model block whole, the experts of a block with it"),
      Unstored("zero_optimization.save_muon_momentum_buffer_in_memory", ValueKind::kBool).Inert(),
      Unstored("allgather_size", ValueKind::kAny).Inert(),  // only with the pre-0.3 `zero_optimization: true`
      Unstored("vocabulary_size", ValueKind::kAny).Inert(),  // read by data efficiency's random-LTD only
  });
}

const std::vector<OpenFeatureSection>& OpenSectionsOfFeaturesNotBuilt() {
  static const auto* sections = new std::vector<OpenFeatureSection>{
      {"autotuning.arg_mappings", "DeepSpeed's autotuning"},
      {"compression_training", "DeepSpeed's compression training"},
      {"curriculum_learning.schedule_config", "curriculum learning"},
      {"data_efficiency", "DeepSpeed's data efficiency library"},
      {"weight_quantization.post_init_quant", "weight quantization"},
      {"weight_quantization.quantized_initialization", "weight quantization"},
  };
  return *sections;
}

}  // namespace dslaunch::runtime::config_internal

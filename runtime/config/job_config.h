// The job file (train.cfg, YAML) and DeepSpeed's ds_config (JSON or YAML),
// parsed strictly into plain structs.
//
// Note [Config strictness]
// Every key DeepSpeed documents is accepted with DeepSpeed's default. An
// unknown key, a value of the wrong type or an impossible value is an error
// that names the file, the key path (e.g. `zero_optimization.stage`), the
// value, and for unknown keys the nearest valid key. Every problem of a file is
// reported at once. Keys whose feature is not built yet are accepted and
// reported as "not yet supported" only when their value would change
// behaviour (e.g. zero_optimization.stage: 2 before ZeRO-2 exists).
//
// Note ["auto"]
// Wherever DeepSpeed users write "auto" it is accepted and resolved from the
// job file (train.lr, ...), the model (width -> bucket sizes) and the world
// size (batch triad), as the Hugging Face Trainer would fill it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/schedule/loss_scaler_config.h"
#include "runtime/schedule/lr_schedule_config.h"

namespace dslaunch::runtime {

// Fp16Config (loss_scaler_config.h) and SchedulerConfig (lr_schedule_config.h)
// live beside the code that runs them, below this folder (Note [Folder layers]).

struct Bf16Config {
  bool enabled = false;
};

struct OptimizerConfig {
  std::string type = "AdamW";     // Adam, AdamW (built); Lamb, ... accepted, refused at run time
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool adam_w_mode = true;        // Adam with adam_w_mode=true behaves as AdamW (DeepSpeed)
  bool present = false;           // false: no "optimizer" section (the job file's train section decides)
};

struct OffloadConfig {
  std::string device = "none";  // none | cpu | nvme
  std::string nvme_path;
  double ratio = 1.0;
  // offload_optimizer only (dslaunch's key; DeepSpeed has none): the ZeRO-
  // Offload paper's one-step-delayed parameter update (Note [Delayed
  // parameter update] in runtime/engine/engine.h).
  bool delay_update = false;
  // With delay_update: the first steps that update at once before the delay
  // begins (the paper's warm-up: the early steps move the weights most).
  int64_t delay_update_warmup_steps = 0;
  // offload_param with device nvme only: parameter elements per rank kept in
  // host memory instead of the drive (DeepSpeed's key, which DeepSpeed
  // itself ignores: deepspeedai/DeepSpeed#4221). Unset: 0, every piece on
  // the drive, as DeepSpeed behaves (Note [Parameters on NVMe]).
  int64_t max_in_cpu = 0;
};

struct ZeroConfig {
  int stage = 0;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;
  bool overlap_comm = false;
  int64_t sub_group_size = 1000000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  bool stage3_gather_16bit_weights_on_model_save = false;
  OffloadConfig offload_optimizer;
  OffloadConfig offload_param;
};

struct ActivationCheckpointingConfig {
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  int number_checkpoints = -1;  // -1: not set
};

struct AioConfig {
  int64_t block_size = 1048576;
  int queue_depth = 8;
  int thread_count = 1;
};

struct PipelineConfig {
  int stages = 1;                        // 1: no pipeline parallelism
  std::string partition_method = "parameters";  // uniform | parameters | type:<regex>
  // Layers per (virtual) stage, in order; overrides partition_method.
  std::vector<int> layers_per_stage;
  std::string schedule = "1f1b";         // 1f1b | interleaved | gpipe (runtime/pipeline)
  int virtual_stages = 1;                // model chunks per rank with the interleaved schedule
  // Megatron's num_layers_per_virtual_pipeline_stage: blocks per model chunk
  // (0: unset); the chunks per rank follow from the model's depth
  // (VirtualStagesOfBlocks, runtime/config/pipeline_chunks.h).
  int num_layers_per_virtual_stage = 0;
  int activation_checkpoint_interval = 0;
  std::string pipe_partitioned = "auto";
  std::string grad_partitioned = "auto";
};

struct TensorParallelConfig {
  int tp_size = 1;
  std::string mpu;
};

struct MoeConfig {
  bool enabled = false;
  int ep_size = 1;
};

struct MonitorConfig {
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
};

struct FlopsProfilerConfig {
  bool enabled = false;
  int profile_step = 1;
  int module_depth = -1;
  int top_modules = 1;
  bool detailed = true;
  std::string output_file;
};

// DeepSpeed's comms_logger block (Note [Comms logger], runtime/comm/comms_logger.h).
struct CommsLoggerConfig {
  bool enabled = false;
  bool verbose = false;
  bool prof_all = true;
  std::vector<std::string> prof_ops;  // as written (DeepSpeed's or this runtime's op names)
};

// ds_config.json, resolved: no "auto" remains and the batch triad agrees
// with the world size.
struct DsConfig {
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
  double gradient_clipping = 0;  // 0: off
  Fp16Config fp16;
  Bf16Config bf16;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  ZeroConfig zero_optimization;
  ActivationCheckpointingConfig activation_checkpointing;
  AioConfig aio;
  std::string aio_section = "aio";  // where the aio keys were read: aio | zero_optimization.aio
  PipelineConfig pipeline;
  TensorParallelConfig tensor_parallel;
  MoeConfig moe;
  int moe_expert_parallel_size = 1;
  int steps_per_print = 10;
  bool wall_clock_breakdown = false;
  bool memory_breakdown = false;
  std::string communication_data_type;  // "" (the gradients' own), fp32, fp16, bf16
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  MonitorConfig tensorboard;
  MonitorConfig csv_monitor;
  MonitorConfig wandb;
  FlopsProfilerConfig flops_profiler;
  CommsLoggerConfig comms_logger;
};

// The expert-parallel size a ds_config asks for: moe_expert_parallel_size,
// else moe.ep_size when moe.enabled (CheckResolvedDsConfig refuses the two
// disagreeing, and moe.ep_size without moe.enabled).
inline int ExpertParallelSize(const DsConfig& c) {
  if (c.moe_expert_parallel_size > 1) return c.moe_expert_parallel_size;
  return c.moe.enabled ? c.moe.ep_size : 1;
}

// model.moe (Note [Mixture of experts] in runtime/moe/moe_options.h):
// DeepSpeed's MoE layer arguments. num_experts 0: a dense model.
struct ModelMoeConfig {
  int num_experts = 0;
  int top_k = 1;  // k
  int every = 1;  // every n-th block is an expert block (2: blocks 1, 3, ...)
  double capacity_factor = 1.0;
  double eval_capacity_factor = 1.0;
  int min_capacity = 4;
  bool drop_tokens = true;             // false: dropless
  bool use_rts = true;                 // top-1: drop at random, not by position
  bool second_expert_sampling = true;  // top-2 in training: the second expert by Gumbel-noised logits
  std::string noisy_gate_policy;       // "" (None), Jitter, RSample
  double aux_loss_coef = 0.01;         // the load-balancing loss's weight in the loss
  double z_loss_coef = 0.0;            // the router z-loss's weight
  bool use_residual = false;           // residual MoE: a dense expert beside the mixture
  bool telemetry = false;              // tokens per expert, dropped fraction, auxiliary loss
                                       // per layer and step
  int expert_row_multiple = 128;       // Note [Expert row buckets]; 1: none
};

struct ModelConfig {
  std::string type = "gpt";  // gpt | llama
  // A Hugging Face model folder (config.json + safetensors) to start from:
  // its config.json gives the sizes (model.layers/heads/width are then not
  // written), its weights replace the random initialisation. llama only.
  std::string from;
  int layers = 0;
  int heads = 0;
  int width = 0;             // embedding / hidden size
  int sequence_length = 0;
  int vocab_size = 0;        // 0 in the file: taken from the prepared dataset
  double dropout = 0.0;
  // On GPUs: LayerNorm, bias+GELU and the loss through the fused CUDA kernels
  // (kernels/cuda). false: LibTorch's ops (for comparison). The optimizer
  // steps CUDA shards with the fused AdamW kernel either way.
  bool fused_kernels = true;
  // Note [Tensor parallelism] (runtime/tensor_parallel): with
  // tensor_parallel.tp_size > 1, norms, residuals and dropout hold only each
  // rank's share of the sequence (Megatron's --sequence-parallel).
  bool sequence_parallel = false;
  // The vocabulary is padded to a multiple of tp_size times this (Megatron's
  // --make-vocab-size-divisible-by); padding rows take no part in the loss.
  int make_vocab_size_divisible_by = 1;
  // The loss's label smoothing ε (Megatron's --label-smoothing).
  double label_smoothing = 0.0;
  ModelMoeConfig moe;
};

// One role of a chat template: the text before and after each turn's content
// (Note [Instruction formats] in runtime/data/instruction_format.h).
struct ChatRoleConfig {
  std::string prefix;
  std::string suffix;
};

struct DataConfig {
  std::string prepared;                 // prefix of a prepared dataset (<prefix>.bin/.idx)
  std::vector<std::string> text_files;  // files or globs to prepare when `prepared` does not exist yet
  // byte | sentencepiece | model (the tokenizer of model.from's folder:
  // LoadModelTokenizer in runtime/tokenizer/model_tokenizer.h).
  std::string tokenizer = "byte";
  int tokenizer_vocab_size = 0;         // sentencepiece: the BPE vocabulary to train
  double validation_fraction = 0.0;     // held-out documents for eval
  bool split_on_percent_lines = false;  // fortune files: documents end at lines holding just "%"

  // Instruction data (runtime/data/prepare_instructions.h): every format but
  // text reads JSON / JSON Lines records from `records` into `prepared`
  // (tokens and a loss mask).
  std::string format = "text";          // text | alpaca | prompt_response | chat
  std::vector<std::string> records;     // files or globs to prepare when `prepared` does not exist yet
  std::string prompt_field = "prompt";  // prompt_response
  std::string response_field = "response";
  // chat: data.chat_template.{system,user,assistant}.{prefix,suffix}; user
  // and assistant are required; records may have system turns when the
  // system role has a prefix or suffix (chat_has_system).
  ChatRoleConfig chat_system;
  ChatRoleConfig chat_user;
  ChatRoleConfig chat_assistant;
  bool chat_has_system = false;
  bool packing = false;                 // several whole records per sample (else one, padded)
  std::string on_bad_record = "refuse";   // refuse | skip
  std::string on_long_record = "refuse";  // refuse | skip | truncate (Note [Long records])

  bool instruction() const { return format != "text"; }
};

struct TrainConfig {
  int64_t steps = 0;
  uint64_t seed = 1234;
  int64_t eval_interval = 0;   // 0: no evaluation
  int64_t eval_steps = 10;
  double lr = 3e-4;            // what "auto" lr resolves to
  double min_lr = 0.0;
  int64_t warmup_steps = 0;    // what "auto" warmup_num_steps resolves to
  double weight_decay = 0.0;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double grad_clip = 0.0;      // what "auto" gradient_clipping resolves to
  int64_t micro_batch_size = 0;         // what "auto" train_micro_batch_size_per_gpu resolves to (0: unset)
  int64_t global_batch_size = 0;        // what "auto" train_batch_size resolves to (0: unset)
  std::string precision = "fp32";       // what "auto" fp16/bf16.enabled resolve from: fp32 | fp16 | bf16
  // fp32/bf16: this many steps in a row with a non-finite loss or gradient
  // norm (each skipped) stop the job (Note [Non-finite guard]).
  int64_t max_nonfinite_steps = 3;
};

// The trained model as a Hugging Face folder when the job ends (llama).
// The `lora` section: PEFT's LoraConfig keys (Note [LoRA] in
// runtime/model/lora_linear.h). r 0: no LoRA, every parameter trains.
struct LoraConfig {
  int64_t r = 0;
  double lora_alpha = 8;                     // PEFT's default
  double lora_dropout = 0;
  std::vector<std::string> target_modules;  // required with r > 0
  std::string bias = "none";                 // only none: the base's biases stay frozen
  bool use_rslora = false;                   // scale lora_alpha / sqrt(r)
};

struct ExportConfig {
  // With LoRA, hf_dir gets the base with the adapters merged into it, and
  // adapter_dir the adapters alone as a PEFT folder.
  std::string adapter_dir;              // empty: no adapter export
  std::string hf_dir;                   // empty: no export
  std::string dtype = "bfloat16";       // float32 | float16 | bfloat16
  std::string max_shard_size = "5GB";   // save_pretrained's default
};

struct CheckpointConfig {
  std::string dir;            // empty: no checkpoints
  int64_t interval = 0;       // steps between saves (0: only at the end)
  int keep = 0;               // how many complete checkpoints to keep (0: all)
  bool resume = true;         // resume from <dir>/latest when it exists
};

// The world the config is resolved for.
struct WorldShape {
  int world_size = 1;
};

struct JobConfig {
  std::string path;  // the train.cfg it came from
  ModelConfig model;
  DataConfig data;
  LoraConfig lora;
  ExportConfig export_;  // the `export` section
  TrainConfig train;
  CheckpointConfig checkpoint;
  DsConfig ds;
  std::string ds_config_path;  // where `ds_config` pointed, or "" when inline
  // Features configured that the runtime does not implement yet, one line each
  // ("zero_optimization.stage=2: ZeRO stage 2 is not yet supported").
  std::vector<std::string> not_yet_supported;
  // ds_config keys given that have no effect here (Note [Keys without effect
  // here], config_schema.h), one warning line each; the job runs.
  std::vector<std::string> without_effect;
};

}  // namespace dslaunch::runtime

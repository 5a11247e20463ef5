#include "runtime/config/job_config_schema.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/config/config_limits.h"
#include "runtime/config/pipeline_chunks.h"
#include "runtime/fs/path.h"  // not std::filesystem (fs/file_system.h says why)

namespace dslaunch::runtime::config_internal {
namespace {

// The byte tokenizer's vocabulary: one symbol per byte value.
constexpr int kByteVocabularySize = 256;

constexpr char kJinjaRefusal[] =
    "Jinja chat templates (tokenizer_config.json's chat_template) are not interpreted: write the template as "
    "data.chat_template.{system,user,assistant}.{prefix,suffix} strings (docs/runtime.md, Instruction data)";

// The instruction-data keys of `data` (FinishJobConfig).
void CheckInstructionData(const WalkResult& walk, const JobConfig& job,
                          const std::function<void(const std::string&, absl::string_view)>& problem_at,
                          const std::function<void(const std::string&, absl::string_view)>& problem_in_data) {
  const DataConfig& data = job.data;
  if (walk.invalid.count("data.chat_template") && walk.given.at("data.chat_template").node.IsScalar()) {
    problem_at("data.chat_template", kJinjaRefusal);
  }
  const std::string format = absl::StrCat("data.format ", data.format);
  // Keys of the other mode are refused when they would change something
  // (their defaults are what `dsrank --describe` writes back).
  const DataConfig defaults;
  const bool chat_template_written = data.chat_has_system || !data.chat_user.prefix.empty() ||
                                     !data.chat_user.suffix.empty() || !data.chat_assistant.prefix.empty() ||
                                     !data.chat_assistant.suffix.empty();
  if (!data.instruction()) {
    const std::pair<const char*, bool> set[] = {
        {"data.records", !data.records.empty()},
        {"data.prompt_field", data.prompt_field != defaults.prompt_field},
        {"data.response_field", data.response_field != defaults.response_field},
        {"data.chat_template", chat_template_written},
        {"data.packing", data.packing},
        {"data.on_bad_record", data.on_bad_record != defaults.on_bad_record},
        {"data.on_long_record", data.on_long_record != defaults.on_long_record}};
    for (const auto& [key, written] : set) {
      if (written) {
        problem_at(key, "is for instruction records (data.format alpaca, prompt_response or chat), not data.format text");
      }
    }
    return;
  }
  if (!data.text_files.empty()) {
    problem_at("data.text_files", absl::StrCat("is for data.format text; ", format, " reads data.records"));
  }
  if (data.prepared.empty()) {
    problem_in_data("data.prepared", absl::StrCat("required with ", format, " (where the tokenized records go)"));
  }
  if (data.tokenizer == "sentencepiece") {
    problem_at("data.tokenizer",
               "sentencepiece trains a new vocabulary; instruction records need the model's own tokenizer (model: "
               "model.from's folder) or byte");
  }
  if (data.tokenizer_vocab_size != 0) {
    problem_at("data.tokenizer_vocab_size", absl::StrCat("is for a trained sentencepiece tokenizer, not ", format));
  }
  if (data.split_on_percent_lines) {
    problem_at("data.split_on_percent_lines", absl::StrCat("is for text files, not ", format));
  }
  if (data.format != "prompt_response") {
    if (data.prompt_field != defaults.prompt_field) {
      problem_at("data.prompt_field", absl::StrCat("is for data.format prompt_response, not ", data.format));
    }
    if (data.response_field != defaults.response_field) {
      problem_at("data.response_field", absl::StrCat("is for data.format prompt_response, not ", data.format));
    }
  }
  if (data.format != "chat" && chat_template_written) {
    problem_at("data.chat_template", absl::StrCat("is for data.format chat, not ", data.format));
  }
  if (data.format == "chat" && !walk.invalid.count("data.chat_template")) {
    for (const char* role : {"data.chat_template.user", "data.chat_template.assistant"}) {
      if (!walk.Has(role)) {
        problem_in_data(role, "required with data.format chat (prefix and suffix strings; Jinja is not interpreted)");
      }
    }
  }
}

}  // namespace

std::vector<KeySpec> JobConfigKeys(JobConfig* job) {
  ModelConfig* m = &job->model;
  DataConfig* d = &job->data;
  TrainConfig* t = &job->train;
  CheckpointConfig* c = &job->checkpoint;
  return {
      Key("model.type", &m->type).OneOf({"gpt", "llama"}),
      Key("model.from", &m->from),
      // Required unless model.from gives them (FinishJobConfig).
      Key("model.layers", &m->layers).Min(1).Max(kMaxModelLayers),
      Key("model.heads", &m->heads).Min(1).Max(kMaxModelHeads),
      Key("model.width", &m->width).Min(1).Max(kMaxModelWidth),
      Key("model.sequence_length", &m->sequence_length).Min(1).Max(kMaxSequenceLength).Required(),
      Key("model.vocab_size", &m->vocab_size).Min(0).Max(kMaxVocabularySize),
      Key("model.dropout", &m->dropout).Min(0).Below(1),
      Key("model.fused_kernels", &m->fused_kernels),
      Key("model.sequence_parallel", &m->sequence_parallel),
      Key("model.label_smoothing", &m->label_smoothing).Min(0).Below(1),
      Key("model.make_vocab_size_divisible_by", &m->make_vocab_size_divisible_by).Min(1).Max(1 << 16),
      Key("model.moe.num_experts", &m->moe.num_experts).Min(0).Max(1 << 16),
      Key("model.moe.top_k", &m->moe.top_k).Min(1).Max(1 << 16),
      Key("model.moe.every", &m->moe.every).Min(1).Max(kMaxModelLayers),
      Key("model.moe.capacity_factor", &m->moe.capacity_factor).Min(0),
      Key("model.moe.eval_capacity_factor", &m->moe.eval_capacity_factor).Min(0),
      Key("model.moe.min_capacity", &m->moe.min_capacity).Min(0),
      Key("model.moe.drop_tokens", &m->moe.drop_tokens),
      Key("model.moe.use_rts", &m->moe.use_rts),
      Key("model.moe.second_expert_sampling", &m->moe.second_expert_sampling),
      Key("model.moe.noisy_gate_policy", &m->moe.noisy_gate_policy).OneOf({"", "None", "Jitter", "RSample"}).Nullable(),
      Key("model.moe.aux_loss_coef", &m->moe.aux_loss_coef).Min(0),
      Key("model.moe.z_loss_coef", &m->moe.z_loss_coef).Min(0),
      Key("model.moe.use_residual", &m->moe.use_residual),
      Key("model.moe.telemetry", &m->moe.telemetry),
      Key("model.moe.expert_row_multiple", &m->moe.expert_row_multiple).Min(1).Max(1 << 16),

      Key("data.prepared", &d->prepared),
      Key("data.text_files", &d->text_files),
      Key("data.tokenizer", &d->tokenizer).OneOf({"byte", "sentencepiece", "model"}),
      Key("data.tokenizer_vocab_size", &d->tokenizer_vocab_size).Min(0).Max(kMaxVocabularySize),
      Key("data.validation_fraction", &d->validation_fraction).Min(0).Below(1),
      Key("data.split_on_percent_lines", &d->split_on_percent_lines),
      Key("data.format", &d->format).OneOf({"text", "alpaca", "prompt_response", "chat"}),
      Key("data.records", &d->records),
      Key("data.prompt_field", &d->prompt_field),
      Key("data.response_field", &d->response_field),
      Key("data.chat_template.system.prefix", &d->chat_system.prefix),
      Key("data.chat_template.system.suffix", &d->chat_system.suffix),
      Key("data.chat_template.user.prefix", &d->chat_user.prefix),
      Key("data.chat_template.user.suffix", &d->chat_user.suffix),
      Key("data.chat_template.assistant.prefix", &d->chat_assistant.prefix),
      Key("data.chat_template.assistant.suffix", &d->chat_assistant.suffix),
      Key("data.packing", &d->packing),
      Key("data.on_bad_record", &d->on_bad_record).OneOf({"refuse", "skip"}),
      Key("data.on_long_record", &d->on_long_record).OneOf({"refuse", "skip", "truncate"}),

      Key("train.steps", &t->steps).Min(1).Required(),
      Key("train.seed", &t->seed),
      Key("train.eval_interval", &t->eval_interval).Min(0),
      Key("train.eval_steps", &t->eval_steps).Min(1),
      Key("train.lr", &t->lr).Min(0),
      Key("train.min_lr", &t->min_lr).Min(0),
      Key("train.warmup_steps", &t->warmup_steps).Min(0),
      Key("train.weight_decay", &t->weight_decay).Min(0),
      Key("train.betas", &t->betas).Min(0).Below(1),
      Key("train.eps", &t->eps).Min(0),
      Key("train.grad_clip", &t->grad_clip).Min(0),
      // null or absent: not set ("auto" batch sizes then come from the other keys).
      Key("train.micro_batch_size", &t->micro_batch_size).Min(1).Max(kMaxMicroBatchSize).Nullable(),
      Key("train.global_batch_size", &t->global_batch_size).Min(1).Max(kMaxGlobalBatchSize).Nullable(),
      Key("train.precision", &t->precision).OneOf({"fp32", "fp16", "bf16"}),
      Key("train.max_nonfinite_steps", &t->max_nonfinite_steps).Min(1),

      Key("lora.r", &job->lora.r).Min(0).Max(kMaxModelWidth),
      Key("lora.lora_alpha", &job->lora.lora_alpha).Min(0),
      Key("lora.lora_dropout", &job->lora.lora_dropout).Min(0).Below(1),
      Key("lora.target_modules", &job->lora.target_modules),
      Key("lora.bias", &job->lora.bias).OneOf({"none"}),
      Key("lora.use_rslora", &job->lora.use_rslora),

      Key("export.adapter_dir", &job->export_.adapter_dir),
      Key("export.hf_dir", &job->export_.hf_dir),
      Key("export.dtype", &job->export_.dtype).OneOf({"float32", "float16", "bfloat16"}),
      Key("export.max_shard_size", &job->export_.max_shard_size),

      Key("checkpoint.dir", &c->dir),
      Key("checkpoint.interval", &c->interval).Min(0),
      Key("checkpoint.keep", &c->keep).Min(0),
      Key("checkpoint.resume", &c->resume),

      Unstored("ds_config", ValueKind::kAny),
  };
}

WalkResult WalkJobConfig(const YAML::Node& root, const TreeSource& source, JobConfig* job,
                         Problems* problems) {
  SchemaWalker walker(JobConfigKeys(job));
  walker.AddMisplacedKey("data.chat_template.jinja", kJinjaRefusal);
  return walker.Walk(root, source, problems);
}

double EstimateGptParameters(const ModelConfig& model, int64_t vocabulary) {
  const double width = model.width;
  const double per_block = 12 * width * width + 13 * width;
  return (static_cast<double>(vocabulary) + model.sequence_length) * width + model.layers * per_block +
         2 * width;
}

void CheckMoe(const WalkResult& walk, const TreeSource& source, const WalkResult& ds_walk, const TreeSource& ds_source,
              const JobConfig& job, Problems* problems) {
  auto at_ds = [&](const std::string& key, const std::string& message) {
    problems->AtKey(ds_source, ds_walk.WrittenPath(key), ds_walk.MarkOf(key), message);
  };
  auto at_job = [&](const std::string& key, const std::string& message) {
    problems->AtKey(source, walk.WrittenPath(key), walk.MarkOf(key), message);
  };
  const ModelMoeConfig& moe = job.model.moe;
  const int ep = ExpertParallelSize(job.ds);
  const std::string ep_key = job.ds.moe_expert_parallel_size > 1 ? "moe_expert_parallel_size" : "moe.ep_size";
  // Note [Experts in pipeline stages]: the experts whole on each stage (a
  // Mixtral folder's too).
  if (job.ds.pipeline.stages > 1 && ep > 1 && (!job.model.from.empty() || moe.num_experts > 0)) {
    at_ds(ep_key, absl::StrCat(ep, ": expert parallelism with pipeline.stages=", job.ds.pipeline.stages,
                               " is not yet supported (each stage holds its layers' experts whole at size 1)"));
  }
  if (!job.model.from.empty()) {
    // A Mixtral folder's config.json gives its experts and their routing;
    // the rank refuses expert parallelism for a folder without experts.
    // Compared with the defaults: a described job file writes every key.
    const ModelMoeConfig d;
    const std::pair<const char*, bool> changed[] = {
        {"num_experts", moe.num_experts != d.num_experts},
        {"top_k", moe.top_k != d.top_k},
        {"every", moe.every != d.every},
        {"capacity_factor", moe.capacity_factor != d.capacity_factor},
        {"eval_capacity_factor", moe.eval_capacity_factor != d.eval_capacity_factor},
        {"min_capacity", moe.min_capacity != d.min_capacity},
        {"drop_tokens", moe.drop_tokens != d.drop_tokens},
        {"use_rts", moe.use_rts != d.use_rts},
        {"second_expert_sampling", moe.second_expert_sampling != d.second_expert_sampling},
        {"noisy_gate_policy", !moe.noisy_gate_policy.empty() && moe.noisy_gate_policy != "None"},
        {"aux_loss_coef", moe.aux_loss_coef != d.aux_loss_coef},
        {"z_loss_coef", moe.z_loss_coef != d.z_loss_coef},
        {"use_residual", moe.use_residual != d.use_residual},
        {"expert_row_multiple", moe.expert_row_multiple != d.expert_row_multiple}};
    for (const auto& [key, different] : changed) {
      if (!different) continue;
      at_job(absl::StrCat("model.moe.", key),
             absl::StrCat("comes from model.from's config.json (", job.model.from,
                          "; Mixtral's num_local_experts, num_experts_per_tok, router_aux_loss_coef): remove it "
                          "from the job file"));
    }
    return;
  }
  if (moe.num_experts == 0) {
    if (job.ds.moe.enabled)
      at_ds("moe.enabled",
            "true, but the job's model has no experts (set "
            "model.moe.num_experts)");
    if (ep > 1)
      at_ds(ep_key, absl::StrCat(ep,
                                 ": expert parallelism, but the job's model has no experts "
                                 "(set model.moe.num_experts)"));
    // Changed from their defaults (a described job file writes every key).
    const ModelMoeConfig defaults;
    for (auto [key, changed] :
         {std::pair{"model.moe.top_k", moe.top_k != defaults.top_k},
          std::pair{"model.moe.every", moe.every != defaults.every},
          std::pair{"model.moe.capacity_factor", moe.capacity_factor != defaults.capacity_factor}}) {
      if (changed) at_job(key, "set, but model.moe.num_experts is 0 (a dense model)");
    }
    return;
  }
  if (moe.top_k > moe.num_experts) {
    at_job("model.moe.top_k", absl::StrCat(moe.top_k, " is more than model.moe.num_experts (", moe.num_experts, ")"));
  }
  if (moe.capacity_factor <= 0 || moe.eval_capacity_factor <= 0) {
    at_job(moe.capacity_factor <= 0 ? "model.moe.capacity_factor" : "model.moe.eval_capacity_factor",
           "must be positive");
  }
  if (ep > 1 && moe.num_experts % ep != 0) {
    at_job("model.moe.num_experts", absl::StrCat(moe.num_experts, " is not a multiple of the expert-parallel size (",
                                                 ep_key, "=", ep, "): each rank of an expert group holds as many"));
  }
  if (job.ds.tensor_parallel.tp_size > 1) {
    at_job("model.moe.num_experts", absl::StrCat("experts with tensor_parallel.tp_size=",
                                                 job.ds.tensor_parallel.tp_size, " are not yet supported"));
  }
  if (!job.export_.hf_dir.empty()) {
    at_job("export.hf_dir",
           "Hugging Face export of a mixture-of-experts "
           "(Mixtral) model is not yet supported");
  }
}

void CheckLoraWithTensorParallelism(const WalkResult& walk, const TreeSource& source, const JobConfig& job,
                                    Problems* problems) {
  const int64_t tp = job.ds.tensor_parallel.tp_size;
  if (job.lora.r <= 0 || tp <= 1) return;
  // Note [LoRA under tensor parallelism]: the adapters split with their
  // projections, but for the output head, which is split by vocabulary.
  const auto& targets = job.lora.target_modules;
  if (std::find(targets.begin(), targets.end(), "lm_head") != targets.end()) {
    problems->AtKey(source, walk.WrittenPath("lora.target_modules"), walk.MarkOf("lora.target_modules"),
                    absl::StrCat("a LoRA adapter on lm_head with tensor_parallel.tp_size=", tp,
                                 " is not yet supported (the head is split by vocabulary over the tensor group)"));
  }
}

void CheckPipeline(const WalkResult& walk, const TreeSource& source, const WalkResult& ds_walk,
                   const TreeSource& ds_source, const JobConfig& job, Problems* problems) {
  const PipelineConfig& pipe = job.ds.pipeline;
  auto at_ds = [&](const std::string& key, const std::string& message) {
    problems->AtKey(ds_source, ds_walk.WrittenPath(key), ds_walk.MarkOf(key), message);
  };
  auto at_job = [&](const std::string& key, const std::string& message) {
    problems->AtKey(source, walk.WrittenPath(key), walk.MarkOf(key), message);
  };
  if (pipe.virtual_stages > 1 && pipe.schedule != "interleaved") {
    at_ds("pipeline.virtual_stages", absl::StrCat(pipe.virtual_stages, " model chunks per rank need pipeline.schedule: "
                                                  "interleaved (the schedule is ", pipe.schedule, ")"));
  }
  // Megatron's num_layers_per_virtual_pipeline_stage: the chunks per stage
  // follow from the model's depth (here when model.layers says it; a
  // model.from folder's at the rank).
  int virtual_stages = pipe.virtual_stages;
  if (pipe.num_layers_per_virtual_stage > 0) {
    const std::string key = "pipeline.num_layers_per_virtual_stage";
    if (pipe.schedule != "interleaved") {
      at_ds(key, absl::StrCat("cuts the model into chunks for pipeline.schedule: interleaved (the schedule is ",
                              pipe.schedule, ")"));
    } else if (!pipe.layers_per_stage.empty()) {
      at_ds(key, "and pipeline.layers_per_stage both say how the layers are cut: set one of them");
    } else if (pipe.stages > 1 && job.model.from.empty() && walk.HasValue("model.layers")) {
      auto cut = VirtualStagesOfBlocks(job.model.layers, pipe.stages, pipe.num_layers_per_virtual_stage);
      if (!cut.ok()) {
        at_ds(key, std::string(cut.status().message().substr(key.size() + 1)));
      } else if (pipe.virtual_stages > 1 && pipe.virtual_stages != cut->virtual_stages) {
        at_ds("pipeline.virtual_stages",
              absl::StrCat(pipe.virtual_stages, " but pipeline.num_layers_per_virtual_stage=",
                           pipe.num_layers_per_virtual_stage, " gives ", cut->virtual_stages, " model chunks per stage (",
                           job.model.layers, " blocks over ", pipe.stages, " stages)"));
      } else {
        virtual_stages = cut->virtual_stages;
      }
    }
  }
  if (pipe.activation_checkpoint_interval > 0) {
    const std::string key = "pipeline.activation_checkpoint_interval";
    if (pipe.stages <= 1) {
      at_ds(key, "recomputes segments of each pipeline stage and needs pipeline.stages > 1 (without a pipeline, "
                 "activation_checkpointing.number_checkpoints says which layers are recomputed)");
    } else if (job.ds.activation_checkpointing.number_checkpoints > 0) {
      at_ds(key, absl::StrCat("and activation_checkpointing.number_checkpoints=",
                              job.ds.activation_checkpointing.number_checkpoints,
                              " both say what is recomputed: set one of them"));
    }
  }
  if (pipe.stages <= 1) return;
  const std::string stages = absl::StrCat("pipeline.stages=", pipe.stages);
  if (job.ds.zero_optimization.stage == 3) {
    at_ds("zero_optimization.stage", absl::StrCat("3 with ", stages,
                                                  ": ZeRO-3 would gather every layer again for each micro-batch pass; "
                                                  "use stage 1 or 2 with a pipeline"));
  }
  const int64_t micro_batches = job.ds.gradient_accumulation_steps;
  if (pipe.schedule == "interleaved" && micro_batches > 0 && micro_batches % pipe.stages != 0) {
    at_ds("pipeline.schedule", absl::StrCat("interleaved needs gradient_accumulation_steps (the micro-batches per "
                                            "step, ", micro_batches, ") to be a multiple of ", stages));
  }
  const int parts = pipe.stages * virtual_stages;
  if (!pipe.layers_per_stage.empty() && static_cast<int>(pipe.layers_per_stage.size()) != parts) {
    at_ds("pipeline.layers_per_stage", absl::StrCat("has ", pipe.layers_per_stage.size(), " entries; the pipeline has ",
                                                    parts, " (virtual) stages"));
  }
  // The layer list: the embedding, each block, the head. A model.from
  // folder's depth is known once it is read (the rank checks it then).
  if (job.model.from.empty() && walk.HasValue("model.layers")) {
    const int64_t layers = job.model.layers + 2;
    if (parts > layers) {
      at_ds("pipeline.stages", absl::StrCat(parts, " (virtual) stages for ", layers, " layers (the embedding, ",
                                            job.model.layers, " blocks, the head): each stage needs one"));
    }
    int64_t sum = 0;
    for (int n : pipe.layers_per_stage) sum += n;
    if (!pipe.layers_per_stage.empty() && sum != layers) {
      at_ds("pipeline.layers_per_stage", absl::StrCat("adds up to ", sum, " layers; the model has ", layers,
                                                      " (the embedding, ", job.model.layers, " blocks, the head)"));
    }
  }
}

void CheckJobScale(const WalkResult& walk, const TreeSource& source, const WalkResult& ds_walk,
                   const TreeSource& ds_source, const JobConfig& job, Problems* problems) {
  const ModelConfig& model = job.model;
  const bool dims_usable = model.from.empty() && walk.HasValue("model.layers") && walk.HasValue("model.width") &&
                           walk.HasValue("model.sequence_length") && !walk.invalid.count("model.vocab_size");
  if (!dims_usable) return;  // their own problems are reported
  // Vocabulary 0 in the file: the dataset's, which the tokenizer decides.
  const int64_t vocabulary = model.vocab_size > 0               ? model.vocab_size
                             : job.data.tokenizer == "byte"     ? kByteVocabularySize
                                                                : job.data.tokenizer_vocab_size;
  const double parameters = EstimateGptParameters(model, vocabulary);
  if (parameters > kMaxModelParameters) {
    problems->AtKey(source, walk.WrittenPath("model"), walk.MarkOf("model"),
                    absl::StrFormat("about %.3g parameters (%d layers of width %d, vocabulary %d, "
                                    "sequence %d): more than the %.0e this runtime accepts (training "
                                    "state of 16 bytes per parameter: %.3g TB)",
                                    parameters, model.layers, model.width, vocabulary,
                                    model.sequence_length, kMaxModelParameters, parameters * 16 / 1e12));
  }
  const int64_t micro = job.ds.train_micro_batch_size_per_gpu;
  const int64_t tokens = micro * model.sequence_length;
  if (micro > 0 && tokens > kMaxTokensPerMicroBatch) {
    const bool in_job = walk.HasValue("train.micro_batch_size");
    const std::string what =
        absl::StrCat(micro, " x model.sequence_length ", model.sequence_length, " = ", tokens,
                     " tokens per micro-batch, more than ", kMaxTokensPerMicroBatch);
    if (in_job) {
      problems->AtKey(source, walk.WrittenPath("train.micro_batch_size"), walk.MarkOf("train.micro_batch_size"),
                      what);
    } else {
      const std::string key = "train_micro_batch_size_per_gpu";
      problems->AtKey(ds_source, ds_walk.WrittenPath(key), ds_walk.MarkOf(key), what);
    }
  }
}

std::string ResolveRelativePath(const std::string& dir, const std::string& path) {
  if (dir.empty() || path.empty() || path.front() == '/') return path;
  return LexicallyNormal(JoinPath(dir, path));
}

void FinishJobConfig(const WalkResult& walk, const TreeSource& source, const std::string& job_dir,
                     JobConfig* job, Problems* problems) {
  auto problem_at = [&](const std::string& path, absl::string_view what) {
    problems->AtKey(source, walk.WrittenPath(path), walk.MarkOf(path), what);
  };

  // Sections whose keys have no usable default. (A present section reports its
  // missing keys one by one in the walk.)
  if (!walk.Has("model")) {
    problem_at("model", "required (type, layers, heads, width, sequence_length)");
  }
  if (!walk.Has("train")) problem_at("train", "required (at least steps)");

  const ModelConfig& model = job->model;
  if (walk.Has("model")) {
    for (const char* key : {"model.layers", "model.heads", "model.width"}) {
      if (model.from.empty() && !walk.Has(key)) {
        problems->AtKey(source, key, walk.MarkOf("model"),
                        "required (or model.from: a Hugging Face model folder whose config.json gives it)");
      } else if (!model.from.empty() && walk.Has(key)) {
        problem_at(key, absl::StrCat("comes from model.from's config.json (", model.from,
                                     "): remove it from the job file"));
      }
    }
    if (!model.from.empty() && model.type != "llama") {
      problem_at("model.from", absl::StrCat("needs model.type: llama (a Hugging Face Llama-family folder), not '",
                                            model.type, "'"));
    }
  }
  if (!job->export_.hf_dir.empty() && model.type != "llama") {
    problem_at("export.hf_dir", absl::StrCat("Hugging Face export is built for model.type llama, not '",
                                             model.type, "'"));
  }
  const LoraConfig& lora = job->lora;
  if (lora.r > 0 && model.type != "llama") {
    problem_at("lora.r", absl::StrCat("LoRA is built for model.type llama, not '", model.type, "'"));
  }
  if (lora.r > 0 && lora.target_modules.empty() && !walk.invalid.count("lora.target_modules")) {
    problem_at("lora.target_modules", "required with lora.r > 0 (for example [q_proj, k_proj, v_proj, o_proj])");
  }
  if (lora.r == 0 && !lora.target_modules.empty() && !walk.invalid.count("lora.r")) {
    problem_at("lora.target_modules", "set, but lora.r is 0 (LoRA off): set lora.r > 0 or remove the targets");
  }
  if (!job->export_.adapter_dir.empty() && lora.r == 0) {
    problem_at("export.adapter_dir", "needs lora.r > 0 (there is no adapter to export)");
  }
  if (walk.HasValue("model.width") && walk.HasValue("model.heads") && model.heads > 0 &&
      model.width % model.heads != 0) {
    problem_at("model.width",
               absl::StrCat(model.width, " is not divisible by model.heads (", model.heads, ")"));
  }

  DataConfig& data = job->data;
  if (!data.instruction() && data.prepared.empty() && data.text_files.empty()) {
    problem_at("data",
               "set prepared (a prepared dataset) or text_files (files to prepare), or both");
  }
  // A key missing from `data` is reported at `data` (its own mark is null).
  auto problem_in_data = [&](const std::string& key, absl::string_view what) {
    problems->AtKey(source, key, walk.MarkOf("data"), what);
  };
  // System turns are allowed when the template gives them text.
  data.chat_has_system = !data.chat_system.prefix.empty() || !data.chat_system.suffix.empty();
  CheckInstructionData(walk, *job, problem_at, problem_in_data);
  if (data.tokenizer == "model" && model.from.empty()) {
    problem_at("data.tokenizer", "model needs model.from (the Hugging Face folder whose tokenizer it is)");
  }
  if (data.tokenizer == "sentencepiece" && data.tokenizer_vocab_size == 0 &&
      !walk.invalid.count("data.tokenizer_vocab_size")) {
    problem_at("data.tokenizer_vocab_size", "required (> 0) with tokenizer sentencepiece");
  }
  if (data.tokenizer == "byte" && walk.HasValue("model.vocab_size") && model.vocab_size != 0 &&
      model.vocab_size < kByteVocabularySize) {
    problem_at("model.vocab_size",
               absl::StrCat(model.vocab_size, " is smaller than the byte tokenizer's ",
                            kByteVocabularySize, " symbols"));
  }

  const TrainConfig& train = job->train;
  if (walk.HasValue("train.min_lr") && train.min_lr > train.lr) {
    problem_at("train.min_lr", absl::StrCat(FormatNumber(train.min_lr), " is above train.lr (",
                                            FormatNumber(train.lr), ")"));
  }

  data.prepared = ResolveRelativePath(job_dir, data.prepared);
  for (std::string& file : data.text_files) file = ResolveRelativePath(job_dir, file);
  for (std::string& file : data.records) file = ResolveRelativePath(job_dir, file);
  job->checkpoint.dir = ResolveRelativePath(job_dir, job->checkpoint.dir);
  job->model.from = ResolveRelativePath(job_dir, job->model.from);
  job->export_.hf_dir = ResolveRelativePath(job_dir, job->export_.hf_dir);
  job->export_.adapter_dir = ResolveRelativePath(job_dir, job->export_.adapter_dir);
}

}  // namespace dslaunch::runtime::config_internal

#include "runtime/dsrank/trainer_setup.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/data/gpt_samples.h"
#include "runtime/data/instruction_samples.h"
#include "runtime/dsrank/instruction_data.h"
#include "runtime/hf/hf_weights.h"
#include "runtime/model/fused_ops.h"
#include "runtime/moe/moe_layer.h"

namespace dslaunch::runtime {

absl::StatusOr<TrainingData> OpenTrainingData(const JobConfig& job, const TrainerContext& context) {
  // The dataset: its vocabulary, and its documents split into training and
  // held-out evaluation (the last validation_fraction of them).
  TrainingData data;
  std::unique_ptr<IndexedDataset>& text_dataset = data.text;
  std::unique_ptr<InstructionDataset>& instruction_dataset = data.instructions;
  int64_t dataset_vocab = 0, documents = 0;
  if (job.data.instruction()) {
    auto opened = InstructionDataset::Open(job.data.prepared);
    if (!opened.ok()) return opened.status();
    instruction_dataset = std::move(*opened);
    dataset_vocab = instruction_dataset->vocab_size();
    documents = instruction_dataset->num_documents();
  } else {
    auto opened = IndexedDataset::Open(job.data.prepared);
    if (!opened.ok()) return opened.status();
    text_dataset = std::move(*opened);
    dataset_vocab = text_dataset->vocab_size();
    documents = text_dataset->num_documents();
  }
  const int64_t vocab = job.model.vocab_size > 0 ? job.model.vocab_size : dataset_vocab;
  if (vocab < dataset_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(job.path, ": model.vocab_size ", vocab,
                                                   " is smaller than the dataset's vocabulary (", dataset_vocab, ")"));
  }
  int64_t train_documents = documents;
  if (job.data.validation_fraction > 0) {
    train_documents = std::max<int64_t>(1, static_cast<int64_t>(documents * (1 - job.data.validation_fraction)));
  }
  const bool evaluate = train_documents < documents && job.train.eval_interval > 0;
  // Evaluation asked for but impossible is said, never dropped in silence.
  auto no_evaluation = [&](const std::string& why) {
    if (context.rank == 0) absl::FPrintF(context.out, "dsrank: no evaluation: %s\n", why);
  };
  if (!evaluate && job.data.validation_fraction > 0 && job.train.eval_interval > 0) {
    no_evaluation(absl::StrCat("data.validation_fraction ", job.data.validation_fraction, " of the dataset's ",
                               documents, " document(s) holds none out (a text prepared from one file is one "
                               "document: prepare it from several, or split the file)"));
  }
  std::unique_ptr<TrainingBatches>& train_samples = data.train;
  std::unique_ptr<TrainingBatches>& eval_samples = data.eval;
  data.vocab = vocab;
  if (instruction_dataset) {
    // Padding is never a target and never attended to; its id only has to exist.
    auto batches = [&](int64_t first, int64_t end) -> absl::StatusOr<std::unique_ptr<TrainingBatches>> {
      auto options = InstructionSamplesOptionsFor(job, /*pad_id=*/0, first, end);
      if (!options.ok()) return options.status();
      auto samples = InstructionSamples::Create(instruction_dataset.get(), *options);
      if (!samples.ok()) return samples.status();
      if (context.rank == 0) {
        absl::FPrintF(context.out, "dsrank: %s data: %s\n", first == 0 ? "training" : "evaluation",
                      (*samples)->Summary());
      }
      return TrainingBatches::Instructions(std::move(*samples), job.data.packing);
    };
    auto train = batches(0, train_documents);
    if (!train.ok()) return train.status();
    train_samples = std::move(*train);
    if (evaluate) {
      auto held_out = batches(train_documents, documents);
      if (held_out.ok()) {
        eval_samples = std::move(*held_out);
      } else {
        no_evaluation(absl::StrCat("the held-out documents make no sample: ", held_out.status().message()));
      }
    }
  } else {
    auto train = GptSamples::Create(text_dataset.get(), text_dataset->DocumentTokens(0, train_documents),
                                    job.model.sequence_length, job.train.seed);
    if (!train.ok()) return train.status();
    train_samples = TrainingBatches::Text(std::move(*train));
    if (evaluate) {
      auto held_out = GptSamples::Create(text_dataset.get(), text_dataset->DocumentTokens(train_documents, documents),
                                         job.model.sequence_length, job.train.seed);
      if (held_out.ok()) {
        eval_samples = TrainingBatches::Text(std::move(*held_out));
      } else {
        no_evaluation(absl::StrCat("the held-out documents make no sample: ", held_out.status().message()));
      }
    }
  }
  return data;
}

absl::StatusOr<ModelSpec> TrainingModelSpec(const JobConfig& job, const TrainerContext& context, int64_t vocab) {
  ModelSpec spec;
  spec.type = job.model.type;
  spec.label_smoothing = job.model.label_smoothing;
  spec.vocab_divisor = job.model.make_vocab_size_divisible_by;
  spec.layers = job.model.layers;
  spec.heads = job.model.heads;
  spec.width = job.model.width;
  spec.sequence_length = job.model.sequence_length;
  spec.vocab_size = vocab;
  spec.dropout = job.model.dropout;
  // DeepSpeed's activation_checkpointing: number_checkpoints evenly spaced
  // blocks are recomputed in backward; cpu_checkpointing keeps their inputs
  // in host memory; partition_activations keeps 1/T of them on each rank of
  // a tensor group.
  const ActivationCheckpointingConfig& checkpointing = job.ds.activation_checkpointing;
  spec.checkpointed_blocks = std::max(0, checkpointing.number_checkpoints);
  spec.checkpoint_to_cpu = checkpointing.cpu_checkpointing;
  spec.partition_checkpoints = checkpointing.partition_activations;
  spec.fused_kernels = job.model.fused_kernels && context.device.is_cuda();
  // Note [Tensor parallelism]: the model holds this rank's slices.
  if (context.parallel && context.parallel->tensor() != nullptr) {
    Communicator* tensor = context.parallel->tensor();
    spec.tensor_parallel = TensorParallelGroup{tensor, tensor->rank(), tensor->size(), job.model.sequence_parallel,
                                               std::make_shared<CommWorker>(context.device)};
  }
  // Note [Mixture of experts]: model.moe, the experts split over this
  // rank's expert group.
  if (job.model.moe.num_experts > 0) {
    const ModelMoeConfig& m = job.model.moe;
    MoeOptions& moe = spec.moe;
    moe.gating.num_experts = m.num_experts;
    moe.gating.top_k = m.top_k;
    moe.gating.capacity_factor = m.capacity_factor;
    moe.gating.eval_capacity_factor = m.eval_capacity_factor;
    moe.gating.min_capacity = m.min_capacity;
    moe.gating.drop_tokens = m.drop_tokens;
    moe.gating.use_rts = m.use_rts;
    moe.gating.second_expert_sampling = m.second_expert_sampling;
    if (!ParseNoisyGatePolicy(m.noisy_gate_policy, &moe.gating.noisy_gate_policy)) {
      return absl::InvalidArgumentError(
          absl::StrCat(job.path, ": model.moe.noisy_gate_policy: '", m.noisy_gate_policy, "'"));
    }
    moe.every = m.every;
    moe.aux_loss_coef = m.aux_loss_coef;
    moe.z_loss_coef = m.z_loss_coef;
    moe.use_residual = m.use_residual;
    moe.expert_row_multiple = m.expert_row_multiple;
  }
  // The rank's expert group, for model.moe's experts or a Mixtral folder's.
  if (context.parallel && context.parallel->expert() != nullptr) {
    Communicator* expert = context.parallel->expert();
    spec.moe.expert_parallel = ExpertParallelGroup{expert, expert->rank(), expert->size()};
  }
  if (spec.moe.enabled()) {
    if (const std::string problem = CheckMoeOptions(spec.moe); !problem.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(job.path, ": ", problem));
    }
  }
  if (spec.fused_kernels && !FusedKernelsBuilt()) {
    return absl::FailedPreconditionError(
        "model.fused_kernels=true on a GPU, but this build has no CUDA kernels (nvcc was not found when it was "
        "configured): rebuild with the CUDA toolkit, or set model.fused_kernels=false");
  }
  if (context.rank == 0 && context.device.is_cuda()) {
    absl::FPrintF(context.out, "dsrank: %s\n",
                  spec.fused_kernels ? (spec.type == "llama" ? "fused CUDA kernels: RMSNorm, SwiGLU, cross-entropy"
                                                             : "fused CUDA kernels: LayerNorm, bias+GELU, cross-entropy")
                                     : "model.fused_kernels=false: LibTorch ops");
  }
  return spec;
}

absl::StatusOr<std::unique_ptr<HfParameterSource>> LoadPretrainedWeights(std::unique_ptr<HfModelFolder> opened,
                                                                         const BuiltModel& built,
                                                                         const ModelSpec& spec, const JobConfig& job,
                                                                         const TrainerContext& context) {
  const HfModelFolder& folder = *opened;
  // Split over a tensor group, each rank copies only its slices.
  // Under expert parallelism the folder's other experts are other ranks':
  // an expert tensor whose name differs from one this rank holds only in
  // the expert's index.
  std::set<std::string> expert_forms;
  if (spec.moe.expert_parallel.split()) {
    for (const auto& item : built.module->named_parameters()) {
      if (std::string form = ExpertNameForm(item.key()); !form.empty()) expert_forms.insert(form);
    }
  }
  auto held_elsewhere = [&](const std::string& name) {
    const std::string form = ExpertNameForm(name);
    return !form.empty() && expert_forms.contains(form);
  };
  const std::string dtype = folder.torch_dtype().empty() ? std::string("F32/F16/BF16") : folder.torch_dtype();
  if (spec.deferred_parameters) {
    // Note [Shard-only loading]: checked now, read by the engine.
    if (absl::Status checked = CheckHfWeights(folder, *built.module, built.model->TensorParallelForms(),
                                              spec.tensor_parallel.rank, spec.tensor_parallel.size, held_elsewhere);
        !checked.ok()) {
      return checked;
    }
    if (context.rank == 0) {
      absl::FPrintF(context.out, "dsrank: checked %s (%s weights); each rank reads only its ZeRO-3 pieces\n",
                    job.model.from, dtype);
    }
    return std::make_unique<HfParameterSource>(std::move(opened), built.model->TensorParallelForms(),
                                               spec.tensor_parallel.rank, spec.tensor_parallel.size);
  }
  if (absl::Status loaded = LoadHfWeights(folder, *built.module, built.model->TensorParallelForms(),
                                          spec.tensor_parallel.rank, spec.tensor_parallel.size, held_elsewhere);
      !loaded.ok()) {
    return loaded;
  }
  if (context.rank == 0) absl::FPrintF(context.out, "dsrank: loaded %s (%s weights)\n", job.model.from, dtype);
  return nullptr;
}

absl::StatusOr<TrainingExports> ApplyLoraAndPlanExports(const JobConfig& job, const TrainerContext& context,
                                                         const BuiltModel& built) {
  // LoRA: adapters on the targeted projections, the rest frozen (Note [LoRA]).
  TrainingExports exports;
  LoraSettings& lora = exports.lora;
  std::vector<std::string> targets_written;  // in adapter_config.json, when not lora.target_modules
  if (job.lora.r > 0) {
    lora.adapter.r = job.lora.r;
    lora.adapter.alpha = job.lora.lora_alpha;
    lora.adapter.dropout = job.lora.lora_dropout;
    lora.adapter.use_rslora = job.lora.use_rslora;
    lora.target_modules = job.lora.target_modules;
    auto applied = ApplyLora(*built.module, lora, job.train.seed);
    if (!applied.ok()) return absl::Status(applied.status().code(), absl::StrCat(job.path, ": ", applied.status().message()));
    // PEFT's all-linear takes a mixture-of-experts layer's router (an
    // nn.Linear there); Mixtral's carries an adapter here too, our GPT's
    // plain router does not. The exported adapter_config.json names the
    // projections adapted, so PEFT rebuilds exactly this adapter.
    const std::vector<MoeLayerImpl*> layers = FindMoeLayers(*built.module);
    if (TargetsAllLinear(lora.target_modules) && !layers.empty()) targets_written = applied->adapted_kinds;
    if (context.rank == 0) {
      // Under expert parallelism a rank holds its experts only, so the
      // counts are its share.
      std::string share;
      if (!layers.empty() && layers[0]->options().expert_parallel.split()) {
        share = absl::StrFormat(" (rank 0's share: %d of the %d experts of each layer)", layers[0]->local_experts(),
                                layers[0]->options().gating.num_experts);
      }
      absl::FPrintF(context.out,
                    "dsrank: LoRA r=%d alpha=%g on %d projections: %d trainable parameters, %d frozen (%.3f%%)%s\n",
                    lora.adapter.r, lora.adapter.alpha, applied->adapted_projections, applied->trainable_parameters,
                    applied->frozen_parameters,
                    100.0 * applied->trainable_parameters /
                        std::max<int64_t>(1, applied->trainable_parameters + applied->frozen_parameters),
                    share);
    }
  }
  HfExportOptions& export_options = exports.model;
  if (!job.export_.hf_dir.empty()) {
    if (!built.hf_config_json) {
      return absl::InvalidArgumentError(
          absl::StrCat(job.path, ": export.hf_dir: model.type ", job.model.type, " has no Hugging Face form"));
    }
    auto dtype = ParseExportDtype(job.export_.dtype, "export.dtype");
    if (!dtype.ok()) return dtype.status();
    auto shard = ParseShardSize(job.export_.max_shard_size, absl::StrCat(job.path, ": export.max_shard_size"));
    if (!shard.ok()) return shard.status();
    export_options.folder = job.export_.hf_dir;
    export_options.dtype = *dtype;
    export_options.max_shard_bytes = *shard;
    export_options.config_json = built.hf_config_json(job.export_.dtype);
    export_options.tokenizer_from = job.model.from;
  }
  HfExportOptions& adapter_options = exports.adapter;
  if (!job.export_.adapter_dir.empty()) {
    auto dtype = ParseExportDtype(job.export_.dtype, "export.dtype");
    if (!dtype.ok()) return dtype.status();
    adapter_options.folder = job.export_.adapter_dir;
    adapter_options.dtype = *dtype;
    LoraSettings written = lora;
    if (!targets_written.empty()) written.target_modules = targets_written;
    adapter_options.config_json = PeftAdapterConfigJson(written, job.model.from);
    adapter_options.tokenizer_from = job.model.from;
  }
  return exports;
}

}  // namespace dslaunch::runtime

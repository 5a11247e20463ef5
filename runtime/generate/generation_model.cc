#include "runtime/generate/generation_model.h"

#include <unistd.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/checkpoint/consolidate.h"
#include "runtime/fs/file_system.h"
#include "runtime/generate/int8_weights.h"
#include "runtime/offload/swapped_pieces.h"
#include "runtime/generate/peft_adapter_loader.h"
#include "runtime/generate/streamed_layer_weights.h"
#include "runtime/hf/hf_export.h"
#include "runtime/hf/hf_model_folder.h"
#include "runtime/hf/hf_weights.h"
#include "runtime/model/llama_hf_config.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"

namespace dslaunch::runtime {

absl::StatusOr<torch::Device> ParseGenerationDevice(const std::string& text) {
  try {
    return torch::Device(text);
  } catch (const c10::Error&) {
    return absl::InvalidArgumentError(absl::StrCat("--device '", text, "' is not cpu, cuda or cuda:N"));
  }
}

namespace {

// Every parameter of `model` from the checkpoint's consolidated masters (a
// checkpoint of any tensor-parallel size, consolidated whole), each split
// parameter cut for this rank by `forms` when the model is split.
absl::Status LoadCheckpointWeights(const GenerationModelOptions& options, torch::nn::Module& model,
                                   const std::vector<TensorParallelForm>& forms) {
  const TensorParallelGroup& tp = options.tensor_parallel;
  std::map<std::string, TensorParallelForm> form_of;
  if (tp.split()) {
    for (const TensorParallelForm& form : forms) form_of[form.parameter] = form;
  }
  ConsolidateSummary summary;
  auto tensors = ConsolidateCheckpointInMemory(options.checkpoint, options.checkpoint_tag, {}, &summary);
  if (!tensors.ok()) return tensors.status();
  std::map<std::string, torch::Tensor> by_name;
  for (auto& [name, tensor] : *tensors) {
    if (name.find("lora_") != std::string::npos) {
      return absl::FailedPreconditionError(absl::StrCat(
          options.checkpoint, "/", summary.tag, " holds LoRA adapters (", name,
          "), not the model: serve the job's export.hf_dir (merged), or its export.adapter_dir with --adapter"));
    }
    if (auto form = form_of.find(name); form != form_of.end()) {
      auto sliced = SliceForRank(tensor, form->second, tp.rank, tp.size);
      if (!sliced.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(options.checkpoint, "/", summary.tag, ": ", sliced.status().message()));
      }
      by_name[name] = *sliced;
    } else {
      by_name[name] = tensor;
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters()) {
    auto it = by_name.find(item.key());
    if (it == by_name.end()) {
      return absl::NotFoundError(absl::StrCat(options.checkpoint, "/", summary.tag, " has no parameter ", item.key(),
                                              " of the model ", options.model, " describes"));
    }
    if (it->second.sizes() != item.value().sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.checkpoint, "/", summary.tag, ": parameter ", item.key(), " is [",
          absl::StrJoin(it->second.sizes(), ", "), "], the model ", options.model, " describes [",
          absl::StrJoin(item.value().sizes(), ", "), "]"));
    }
    item.value().copy_(it->second);
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(options.checkpoint, "/", summary.tag, " holds ", by_name.size(),
                                                   " parameters the model ", options.model, " has not, e.g. ",
                                                   by_name.begin()->first));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Llama> LoadGenerationModel(const GenerationModelOptions& options) {
  FileSystem& fs = FileSystem::Default();
  auto folder = HfModelFolder::Open(fs, options.model);
  if (!folder.ok()) return folder.status();
  auto config = ParseLlamaHfConfig((*folder)->config_text(), (*folder)->config_path());
  if (!config.ok()) return config.status();
  auto dtype = ParseExportDtype(options.dtype, "--dtype");
  if (!dtype.ok()) return dtype.status();
  auto device = ParseGenerationDevice(options.device);
  if (!device.ok()) return device.status();
  LlamaOptions model_options = config->options;
  model_options.checkpointed_blocks = options.checkpointed_layers;
  model_options.fused_kernels = options.fused_kernels;
  model_options.tensor_parallel = options.tensor_parallel;
  const TensorParallelGroup& tp = options.tensor_parallel;
  if (tp.split() && model_options.kv_heads % tp.size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(options.model, ": ", model_options.kv_heads,
                                                   " key/value heads do not divide among ", tp.size,
                                                   " tensor-parallel ranks"));
  }
  Llama model(model_options, /*seed=*/0);
  if (options.checkpoint.empty()) {
    if (absl::Status loaded = LoadHfWeights(**folder, *model, model->TensorParallelForms(), tp.rank, tp.size);
        !loaded.ok()) {
      return loaded;
    }
  } else if (absl::Status loaded = LoadCheckpointWeights(options, *model, model->TensorParallelForms());
             !loaded.ok()) {
    return loaded;
  }
  if (!options.adapter.empty()) {
    AdapterSlicing slicing;
    if (tp.split()) slicing = AdapterSlicing{model->TensorParallelForms(), tp.rank, tp.size};
    auto adapted = LoadPeftAdapter(fs, options.adapter, *model, slicing);
    if (!adapted.ok()) return adapted.status();
    // Split over the tensor group, each rank computes its part of the
    // adapters unmerged (Note [LoRA under tensor parallelism]), as one rank does.
  }
  const bool streamed = options.offload_params != "none";
  try {
    // Streamed layers move to their host buffers, in their final form first.
    model->to(streamed ? torch::Device(torch::kCPU) : *device, *dtype);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("moving the model to ", options.device, ": ", e.what_without_backtrace()));
  }
  // Dropout is off either way (Llama has none; config.json's attention_dropout is refused unless 0).
  model->eval();
  if (options.int8) {
    // Streamed layers are quantized in host memory; the tensor group reduces on the device.
    auto report = QuantizeWeightsInt8(model, *device);
    if (!report.ok()) return report.status();
  }
  if (streamed) {
    StreamedLayerWeightsOptions streaming;
    streaming.home = options.offload_params;
    streaming.files.nvme_path = options.nvme_path;
    // This process's own folder: two runs may share a drive. Those of runs
    // that ended without removing theirs go first.
    streaming.files.name = absl::StrCat("inference-layers-", ::getpid(), "-rank", tp.rank);
    if (options.offload_params == "nvme") {
      auto stale = RemoveSwapFoldersOfEndedProcesses(options.nvme_path, "inference-layers-");
      if (!stale.ok()) return stale.status();
    }
    auto installed = StreamedLayerWeights::Install(model, *device, streaming);
    if (!installed.ok()) return installed.status();
  }
  return model;
}

}  // namespace dslaunch::runtime

namespace dslaunch::runtime {

void AddGenerationModelFlags(FlagTable& flags, GenerationModelOptions* options, int64_t* local_rank) {
  flags.String("--model", &options->model, "DIR", "a Hugging Face model folder (config.json, safetensors, tokenizer)")
      .String("--adapter", &options->adapter, "DIR",
              "a PEFT LoRA adapter folder put on the model (unmerged on one rank; merged into each rank's slices "
              "when split over ranks)")
      .String("--checkpoint", &options->checkpoint, "DIR",
              "a training checkpoint (checkpoint.dir of a job that started from --model, any ZeRO stage): its "
              "weights, read in place of the folder's")
      .String("--checkpoint_tag", &options->checkpoint_tag, "TAG", "with --checkpoint: this tag instead of latest")
      .String("--dtype", &options->dtype, "DTYPE", "compute dtype", {"float32", "bfloat16", "float16"})
      .Bool("--int8", &options->int8,
            "weight-only int8 for the decoder's projections (a scale per output row; an --adapter is merged "
            "into them first)")
      .Bool("--fused_kernels", &options->fused_kernels, "the CUDA kernels for RMSNorm, RoPE, SwiGLU and paged decode attention (a CUDA --device)")
      .String("--offload_params", &options->offload_params, "DEVICE",
              "ZeRO-Inference: cpu keeps the decoder layers' weights in (pinned) host memory and streams them to the "
              "device layer by layer, for a model larger than the GPU (not with --cuda_graphs); nvme keeps them in "
              "files under --nvme_path, for a model larger than the host's memory too",
              {"none", "cpu", "nvme"})
      .String("--nvme_path", &options->nvme_path, "DIR",
              "with --offload_params nvme: a folder on a local drive (not tmpfs) for the layers' files, removed at exit")
      .String("--device", &options->device, "DEVICE", "cpu, cuda or cuda:N")
      .Int("--local_rank", local_rank, "N", "what dslaunch (as DeepSpeed's launcher) passes; checked against LOCAL_RANK",
           {0, 1 << 20});
}

std::string GenerationModelFlagsProblem(const GenerationModelOptions& options) {
  if (options.model.empty()) return "--model is required";
  if (!options.checkpoint_tag.empty() && options.checkpoint.empty()) return "--checkpoint_tag goes with --checkpoint";
  if (!options.checkpoint.empty() && !options.adapter.empty()) {
    return "--checkpoint and --adapter exclude each other (a checkpoint holds the whole model)";
  }
  if (options.fused_kernels && options.device.rfind("cuda", 0) != 0) {
    return "--fused_kernels needs a CUDA --device (the kernels run on the GPU)";
  }
  if (options.offload_params == "nvme" && options.nvme_path.empty()) {
    return "--offload_params nvme needs --nvme_path (the folder of the layers' files)";
  }
  if (options.offload_params != "nvme" && !options.nvme_path.empty()) {
    return "--nvme_path goes with --offload_params nvme";
  }
  return "";
}

}  // namespace dslaunch::runtime

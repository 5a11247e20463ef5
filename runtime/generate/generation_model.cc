#include "runtime/generate/generation_model.h"

#include "absl/strings/str_cat.h"
#include "runtime/fs/file_system.h"
#include "runtime/generate/peft_adapter_loader.h"
#include "runtime/hf/hf_export.h"
#include "runtime/hf/hf_model_folder.h"
#include "runtime/hf/hf_weights.h"
#include "runtime/model/llama_hf_config.h"

namespace dslaunch::runtime {

absl::StatusOr<torch::Device> ParseGenerationDevice(const std::string& text) {
  try {
    return torch::Device(text);
  } catch (const c10::Error&) {
    return absl::InvalidArgumentError(absl::StrCat("--device '", text, "' is not cpu, cuda or cuda:N"));
  }
}

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
  Llama model(model_options, /*seed=*/0);
  if (absl::Status loaded = LoadHfWeights(**folder, *model); !loaded.ok()) return loaded;
  if (!options.adapter.empty()) {
    auto adapted = LoadPeftAdapter(fs, options.adapter, *model);
    if (!adapted.ok()) return adapted.status();
  }
  try {
    model->to(*device, *dtype);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("moving the model to ", options.device, ": ", e.what_without_backtrace()));
  }
  // Dropout is off either way (Llama has none; config.json's attention_dropout is refused unless 0).
  model->eval();
  return model;
}

}  // namespace dslaunch::runtime

#include "runtime/generate/peft_adapter_loader.h"

#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "runtime/hf/safetensors_reader.h"

namespace dslaunch::runtime {
namespace {

// A member that may be absent or null, or else must hold its default.
absl::Status RequireDefault(const YAML::Node& root, const std::string& key, const std::string& file,
                            const std::function<bool(const YAML::Node&)>& is_default, const std::string& what) {
  const YAML::Node node = root[key];
  if (!node || node.IsNull() || is_default(node)) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(file, ": ", key, " is set; ", what, " is not supported"));
}

bool EmptyCollection(const YAML::Node& node) { return (node.IsMap() || node.IsSequence()) && node.size() == 0; }
bool Scalar(const YAML::Node& node, const std::string& value) { return node.IsScalar() && node.as<std::string>() == value; }

}  // namespace

absl::StatusOr<LoraSettings> ReadPeftAdapterConfig(FileSystem& fs, const std::string& folder) {
  const std::string file = folder + "/" + kPeftConfigFile;
  auto text = fs.ReadFile(file, 1 << 20);
  if (!text.ok()) return text.status();
  LoraSettings settings;
  try {
    const YAML::Node root = YAML::Load(*text);
    if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(file, ": not a JSON object"));
    if (const YAML::Node type = root["peft_type"]; type && !Scalar(type, "LORA")) {
      return absl::UnimplementedError(
          absl::StrCat(file, ": peft_type ", type.as<std::string>(), " is not supported (LORA only)"));
    }
    const YAML::Node r = root["r"];
    const YAML::Node alpha = root["lora_alpha"];
    if (!r || !alpha) return absl::InvalidArgumentError(absl::StrCat(file, ": r and lora_alpha are required"));
    settings.adapter.r = r.as<int64_t>();
    settings.adapter.alpha = alpha.as<double>();
    if (settings.adapter.r < 1) return absl::InvalidArgumentError(absl::StrCat(file, ": r must be >= 1"));
    if (const YAML::Node rs = root["use_rslora"]; rs && !rs.IsNull()) settings.adapter.use_rslora = rs.as<bool>();
    const YAML::Node targets = root["target_modules"];
    if (targets && targets.IsScalar() && targets.Scalar() == kLoraAllLinear) {
      settings.target_modules.push_back(kLoraAllLinear);
    } else if (targets && targets.IsScalar() && !targets.Scalar().empty()) {
      // PEFT's string form: a pattern the whole module name matches.
      settings.target_pattern = targets.Scalar();
    } else if (targets && targets.IsSequence() && targets.size() > 0) {
      for (const auto& target : targets) settings.target_modules.push_back(target.as<std::string>());
    } else {
      return absl::InvalidArgumentError(absl::StrCat(file, ": target_modules must name the adapted projections"));
    }
    auto is_false = [](const YAML::Node& n) { return n.IsScalar() && !n.as<bool>(); };
    struct Rule {
      const char* key;
      std::function<bool(const YAML::Node&)> is_default;
      const char* what;
    };
    const Rule rules[] = {
        {"use_dora", is_false, "DoRA"},
        {"bias", [](const YAML::Node& n) { return Scalar(n, "none"); }, "training biases with the adapter"},
        {"fan_in_fan_out", is_false, "a transposed (Conv1D) base layer"},
        {"modules_to_save", EmptyCollection, "saving whole modules beside the adapter"},
        {"layers_to_transform", EmptyCollection, "adapting only some layers"},
        {"rank_pattern", EmptyCollection, "a rank per module"},
        {"alpha_pattern", EmptyCollection, "an alpha per module"},
    };
    for (const Rule& rule : rules) {
      if (absl::Status s = RequireDefault(root, rule.key, file, rule.is_default, rule.what); !s.ok()) return s;
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", e.what()));
  }
  return settings;
}

absl::StatusOr<LoraSummary> LoadPeftAdapter(FileSystem& fs, const std::string& folder, torch::nn::Module& model,
                                            const AdapterSlicing& slicing) {
  std::map<std::string, TensorParallelForm> form_of;  // by the projection's weight name
  if (slicing.size > 1) {
    for (const TensorParallelForm& form : slicing.forms) form_of[form.parameter] = form;
  }
  auto settings = ReadPeftAdapterConfig(fs, folder);
  if (!settings.ok()) return settings.status();
  auto summary = ApplyLora(model, *settings, /*seed=*/0);
  if (!summary.ok()) {
    return absl::Status(summary.status().code(),
                        absl::StrCat(folder, "/", kPeftConfigFile, ": ", summary.status().message()));
  }
  const std::string file = folder + "/" + kPeftWeightsFile;
  auto reader = SafetensorsReader::Open(fs, file);
  if (!reader.ok()) return reader.status();
  std::set<std::string> unused;
  for (const SafetensorsEntryInfo& entry : (*reader)->entries()) unused.insert(entry.name);
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters()) {
    if (!IsLoraParameterName(item.key())) continue;
    const std::string key = kPeftKeyPrefix + item.key();
    auto view = (*reader)->View(key);
    if (!view.ok()) {
      return absl::NotFoundError(absl::StrCat(file, " has no tensor ", key, ", which ", kPeftConfigFile,
                                              "'s target_modules put on the model"));
    }
    torch::Tensor values = *view;
    // "<projection>.lora_A.weight": the projection's own weight names its form.
    const std::string projection = item.key().substr(0, item.key().find(".lora_"));
    if (auto form = form_of.find(projection + ".weight"); form != form_of.end()) {
      // Note [LoRA under tensor parallelism]: this rank's part of the factor.
      auto cut = LoraFactorForm(form->second, key);
      if (!cut.ok()) return absl::Status(cut.status().code(), absl::StrCat(file, ": ", cut.status().message()));
      if (cut->has_value()) {
        auto slice = SliceForRank(values, **cut, slicing.rank, slicing.size);
        if (!slice.ok()) return absl::InvalidArgumentError(absl::StrCat(file, ": ", slice.status().message()));
        values = *slice;
      }
    }
    if (values.sizes() != item.value().sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": ", key, " is ", c10::str(values.sizes()),
                                                     slicing.size > 1 ? " (this rank's part)" : "",
                                                     ", the model's adapter is ", c10::str(item.value().sizes())));
    }
    item.value().copy_(values.to(item.value().device(), item.value().scalar_type()));
    unused.erase(key);
  }
  if (!unused.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(file, " holds ", *unused.begin(), ", which is no adapter that ",
                                                   kPeftConfigFile, " puts on this model (", unused.size(),
                                                   " such tensors)"));
  }
  return summary;
}

}  // namespace dslaunch::runtime

#include "runtime/hf/hf_model_folder.h"

#include <set>

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace {

// config.json and the index are small; a multi-megabyte one is not a config.
constexpr int64_t kMaxJsonBytes = 64 << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<HfModelFolder>> HfModelFolder::Open(FileSystem& fs, const std::string& folder) {
  if (!fs.IsDirectory(folder)) {
    return absl::NotFoundError(absl::StrCat(folder, ": not a folder (model.from names a Hugging Face model folder)"));
  }
  std::unique_ptr<HfModelFolder> model(new HfModelFolder());
  model->folder_ = folder;
  auto config = fs.ReadFile(model->config_path(), kMaxJsonBytes);
  if (!config.ok()) {
    return absl::NotFoundError(absl::StrCat(model->config_path(), ": ", config.status().message(),
                                            " (a Hugging Face model folder has a config.json)"));
  }
  model->config_text_ = std::move(*config);
  try {
    YAML::Node root = YAML::Load(model->config_text_);
    if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(model->config_path(), ": not a JSON object"));
    for (const char* key : {"torch_dtype", "dtype"}) {
      if (root[key] && root[key].IsScalar()) model->torch_dtype_ = root[key].Scalar();
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(model->config_path(), ": not valid JSON: ", e.msg));
  }

  const std::string index_path = folder + "/" + kHfWeightsIndexFile;
  const std::string single_path = folder + "/" + kHfSingleWeightsFile;
  std::map<std::string, std::string> weight_map;  // tensor -> file name
  if (fs.Exists(index_path)) {
    auto text = fs.ReadFile(index_path, kMaxJsonBytes);
    if (!text.ok()) return text.status();
    YAML::Node root;
    try {
      root = YAML::Load(*text);
    } catch (const YAML::Exception& e) {
      return absl::DataLossError(absl::StrCat(index_path, ": not valid JSON: ", e.msg));
    }
    if (!root.IsMap() || !root["weight_map"] || !root["weight_map"].IsMap()) {
      return absl::DataLossError(absl::StrCat(index_path, ": no \"weight_map\" object"));
    }
    for (const auto& item : root["weight_map"]) {
      const std::string file = item.second.Scalar();
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
        return absl::DataLossError(absl::StrCat(index_path, ": tensor '", item.first.Scalar(), "' maps to '", file,
                                                "', not a file name in the folder"));
      }
      weight_map[item.first.Scalar()] = file;
    }
    if (weight_map.empty()) return absl::DataLossError(absl::StrCat(index_path, ": the weight_map is empty"));
  } else if (!fs.Exists(single_path)) {
    const bool has_bin = fs.Exists(folder + "/pytorch_model.bin") || fs.Exists(folder + "/pytorch_model.bin.index.json");
    return absl::NotFoundError(absl::StrCat(
        folder, ": no ", kHfSingleWeightsFile, " or ", kHfWeightsIndexFile,
        has_bin ? " (the folder has pytorch_model.bin: pickled weights are not read; save it with "
                  "safe_serialization=True)"
                : ""));
  }

  std::set<std::string> files;
  if (weight_map.empty()) {
    files.insert(kHfSingleWeightsFile);
  } else {
    for (const auto& [tensor, file] : weight_map) files.insert(file);
  }
  for (const std::string& file : files) {
    auto reader = SafetensorsReader::Open(fs, folder + "/" + file);
    if (!reader.ok()) {
      if (absl::IsNotFound(reader.status()) && !weight_map.empty()) {
        return absl::NotFoundError(absl::StrCat(index_path, " names ", file, ", which is missing: ",
                                                reader.status().message()));
      }
      return reader.status();
    }
    for (const SafetensorsEntryInfo& entry : (*reader)->entries()) {
      auto listed = weight_map.find(entry.name);
      if (!weight_map.empty() && (listed == weight_map.end() || listed->second != file)) {
        return absl::DataLossError(absl::StrCat(
            (*reader)->path(), ": holds tensor '", entry.name, "' but ", index_path,
            listed == weight_map.end() ? " does not list it" : absl::StrCat(" puts it in ", listed->second)));
      }
      auto [it, added] = model->where_.emplace(entry.name, reader->get());
      if (!added) {
        return absl::DataLossError(absl::StrCat("tensor '", entry.name, "' is in both ", it->second->path(), " and ",
                                                (*reader)->path()));
      }
    }
    model->files_.push_back(std::move(*reader));
  }
  for (const auto& [tensor, file] : weight_map) {
    if (!model->where_.count(tensor)) {
      return absl::DataLossError(absl::StrCat(folder, "/", file, ": has no tensor '", tensor, "', which ",
                                              index_path, " says it holds"));
    }
  }
  return model;
}

std::vector<std::string> HfModelFolder::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, file] : where_) names.push_back(name);
  return names;
}

const SafetensorsEntryInfo* HfModelFolder::Find(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : it->second->Find(name);
}

std::string HfModelFolder::FileOf(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? folder_ : it->second->path();
}

absl::StatusOr<torch::Tensor> HfModelFolder::View(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return absl::NotFoundError(absl::StrCat(folder_, ": the model has no tensor '", name, "'"));
  return it->second->View(name);
}

}  // namespace dslaunch::runtime

#include "runtime/data/model_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

absl::StatusOr<ModelTokenizerFile> FindModelTokenizer(const std::string& model_dir) {
  if (model_dir.empty()) {
    return absl::InvalidArgumentError("tokenizer 'model' needs the model folder (model.from, or --model_dir)");
  }
  FileSystem& fs = FileSystem::Default();
  if (!fs.Exists(model_dir)) {
    return absl::NotFoundError(absl::StrCat("model folder ", model_dir, " does not exist"));
  }
  const std::string json = model_dir + "/tokenizer.json";
  if (fs.Exists(json)) return ModelTokenizerFile{"hf", json};
  const std::string sentencepiece = model_dir + "/tokenizer.model";
  if (fs.Exists(sentencepiece)) return ModelTokenizerFile{"sentencepiece", sentencepiece};
  return absl::NotFoundError(
      absl::StrCat("model folder ", model_dir, " has no tokenizer.json or tokenizer.model"));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadPreparationTokenizer(const std::string& kind,
                                                                    const std::string& sp_model,
                                                                    const std::string& model_dir) {
  if (kind == "model") {
    absl::StatusOr<ModelTokenizerFile> file = FindModelTokenizer(model_dir);
    if (!file.ok()) return file.status();
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = MakeTokenizer(file->kind, file->path);
    if (!tokenizer.ok()) {
      return absl::Status(tokenizer.status().code(),
                          absl::StrCat("the tokenizer of model folder ", model_dir, " (", file->path,
                                       "): ", tokenizer.status().message()));
    }
    return tokenizer;
  }
  if (kind == "sentencepiece" && sp_model.empty()) {
    return absl::InvalidArgumentError("tokenizer sentencepiece needs a model file (--sp_model)");
  }
  return MakeTokenizer(kind, sp_model);
}

}  // namespace dslaunch::runtime

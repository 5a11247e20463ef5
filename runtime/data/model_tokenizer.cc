#include "runtime/data/model_tokenizer.h"

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadPreparationTokenizer(const std::string& kind,
                                                                    const std::string& sp_model,
                                                                    const std::string& model_dir) {
  if (kind == "model") {
    if (model_dir.empty()) {
      return absl::InvalidArgumentError("tokenizer 'model' needs the model folder (model.from, or --model_dir)");
    }
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = MakeTokenizer("hf", model_dir);
    if (!tokenizer.ok()) {
      return absl::Status(tokenizer.status().code(), absl::StrCat("the tokenizer of model folder ", model_dir, ": ",
                                                                  tokenizer.status().message()));
    }
    return tokenizer;
  }
  if (kind == "sentencepiece" && sp_model.empty()) {
    return absl::InvalidArgumentError("tokenizer sentencepiece needs a model file (--sp_model)");
  }
  return MakeTokenizer(kind, sp_model);
}

}  // namespace dslaunch::runtime

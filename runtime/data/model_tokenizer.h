// The tokenizer a dataset is prepared with (job key `data.tokenizer`, dsprep
// `--tokenizer`): dsprep's own byte or SentencePiece tokenizers, or "model",
// the tokenizer of a Hugging Face model folder (model.from, dsprep
// `--model_dir DIR`), loaded by LoadModelTokenizer (runtime/tokenizer/
// model_tokenizer.h: tokenizer.json first, as transformers' AutoTokenizer,
// else tokenizer.model).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {

// kind "byte"; "sentencepiece" (loads `sp_model`); "model" (the tokenizer of
// the Hugging Face folder `model_dir`). Errors name the kind, file or folder.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadPreparationTokenizer(const std::string& kind,
                                                                    const std::string& sp_model,
                                                                    const std::string& model_dir);

}  // namespace dslaunch::runtime

// The tokenizer of a Hugging Face model folder (job key `data.tokenizer:
// model`, dsprep `--tokenizer model --model_dir DIR`).
//
// Note [Model folder tokenizer]
// A folder's tokenizer.json is what Hugging Face's AutoTokenizer loads by
// default (the "fast" tokenizer), so it is chosen first, as MakeTokenizer kind
// "hf"; a folder with only tokenizer.model (older Llama-2 uploads) gets
// SentencePiece. A folder with neither is an error naming the folder. The
// choice is reported (ModelTokenizerFile::kind) so a summary can show it.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {

struct ModelTokenizerFile {
  std::string kind;  // a MakeTokenizer kind: "hf" or "sentencepiece"
  std::string path;  // the file in the folder
};

// Note [Model folder tokenizer].
absl::StatusOr<ModelTokenizerFile> FindModelTokenizer(const std::string& model_dir);

// kind "byte"; "sentencepiece" (loads `sp_model`); "model" (the tokenizer of
// the Hugging Face folder `model_dir`). Errors name the kind, file or folder.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadPreparationTokenizer(const std::string& kind,
                                                                    const std::string& sp_model,
                                                                    const std::string& model_dir);

}  // namespace dslaunch::runtime

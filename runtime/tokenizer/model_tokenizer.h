// A model's own tokenizer, from the files of a Hugging Face model folder.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {

// `path` is a tokenizer.json (Hugging Face, hf_tokenizer_json.h), a
// tokenizer.model (SentencePiece BPE, read by our own code:
// sentencepiece_model.h, usable beside LibTorch) or a folder
// holding one of them (tokenizer.json preferred when both are there).
//
// The folder's tokenizer_config.json, when present, is read strictly for
// the keys that change ids: add_bos_token and add_eos_token (bools) and
// bos_token / eos_token (a string or {"content": string}, which must be
// tokens of the vocabulary). Without them:
//  - tokenizer.json: bos and eos are what its post_processor template puts
//    around a sequence (Llama 3: <|begin_of_text|> before, nothing after),
//    adds_bos/adds_eos whether it puts them; an eos the template does not
//    name is the special token </s>, <|end_of_text|> or <|endoftext|>, and a
//    tokenizer with none of these is refused (name it in eos_token);
//  - tokenizer.model: adds_bos true, adds_eos false (Llama 2's default).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& path);

}  // namespace dslaunch::runtime

#include "runtime/tokenizer/model_tokenizer.h"

#include <optional>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/bounded_file.h"
#include "common/status_macros.h"
#include "runtime/fs/file_system.h"
#include "runtime/tokenizer/hf_tokenizer.h"
#include "runtime/tokenizer/hf_tokenizer_json.h"
#include "runtime/tokenizer/json_value.h"
#include "runtime/tokenizer/sentencepiece_model.h"

namespace dslaunch::runtime {
namespace {

// The keys of tokenizer_config.json that change ids; the rest (chat
// template, class names, model_max_length, ...) are transformers' business.
struct TokenizerConfig {
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
};

absl::StatusOr<std::optional<std::string>> TokenSetting(const JsonValue& root, absl::string_view key,
                                                        const std::string& path) {
  const JsonValue* value = root.Find(key);
  if (value == nullptr || value->is_null()) return std::optional<std::string>();
  if (value->is_string()) return std::optional<std::string>(value->string_value());
  // transformers also writes an AddedToken: {"content": "<s>", "lstrip": ...}.
  if (value->is_object()) {
    const JsonValue* content = value->Find("content");
    if (content != nullptr && content->is_string()) return std::optional<std::string>(content->string_value());
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", key, " must be a string, {\"content\": string} or null, not ",
                   JsonValue::TypeName(value->type())));
}

absl::StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::string& folder) {
  TokenizerConfig config;
  const std::string path = JoinPath(folder, "tokenizer_config.json");
  if (!FileSystem::Default().Exists(path)) return config;
  DS_ASSIGN_OR_RETURN(std::string text, ReadConfigFile(path, "tokenizer_config.json", kMaxTokenizerJsonBytes));
  DS_ASSIGN_OR_RETURN(JsonValue root, ParseJson(text, path));
  if (!root.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": must hold a JSON object"));
  for (auto [key, target] : {std::pair{"add_bos_token", &config.add_bos_token},
                             std::pair{"add_eos_token", &config.add_eos_token}}) {
    const JsonValue* value = root.Find(key);
    if (value == nullptr || value->is_null()) continue;
    if (!value->is_bool()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", key, " must be a bool, not ", JsonValue::TypeName(value->type())));
    }
    *target = value->bool_value();
  }
  DS_ASSIGN_OR_RETURN(config.bos_token, TokenSetting(root, "bos_token", path));
  DS_ASSIGN_OR_RETURN(config.eos_token, TokenSetting(root, "eos_token", path));
  return config;
}

// The id of a token string: an added token, else a vocabulary entry (as
// HfTokenizer::TokenId answers).
std::optional<int32_t> SpecTokenId(const HfTokenizerSpec& spec, absl::string_view token) {
  for (const HfAddedToken& added : spec.added_tokens) {
    if (added.content == token) return added.id;
  }
  return spec.model->TokenToId(token);
}

// The id of a token named in tokenizer_config.json.
absl::StatusOr<int32_t> ConfiguredId(const HfTokenizerSpec& spec, const std::string& token, absl::string_view key,
                                     const std::string& folder) {
  std::optional<int32_t> id = SpecTokenId(spec, token);
  if (!id.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(JoinPath(folder, "tokenizer_config.json"), ": ", key, " \"",
                                                   token, "\" is not a token of the tokenizer"));
  }
  return *id;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(const std::string& path,
                                                             const std::string& folder) {
  DS_ASSIGN_OR_RETURN(TokenizerConfig config, ReadTokenizerConfig(folder));
  DS_ASSIGN_OR_RETURN(HfTokenizerSpec spec, ReadHfTokenizerJson(path));
  HfSequenceTokens sequence;
  sequence.bos_id = spec.template_bos.value_or(-1);
  sequence.eos_id = spec.template_eos.value_or(-1);
  sequence.adds_bos = config.add_bos_token.value_or(spec.template_bos.has_value());
  sequence.adds_eos = config.add_eos_token.value_or(spec.template_eos.has_value());
  if (config.bos_token.has_value()) {
    DS_ASSIGN_OR_RETURN(sequence.bos_id, ConfiguredId(spec, *config.bos_token, "bos_token", folder));
  }
  if (config.eos_token.has_value()) {
    DS_ASSIGN_OR_RETURN(sequence.eos_id, ConfiguredId(spec, *config.eos_token, "eos_token", folder));
  }
  for (const char* name : {"</s>", "<|end_of_text|>", "<|endoftext|>"}) {
    for (const HfAddedToken& token : spec.added_tokens) {
      if (sequence.eos_id < 0 && token.special && token.content == name) sequence.eos_id = token.id;
    }
  }
  if (sequence.eos_id < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": no eos token (not in the post_processor template, no special </s>, <|end_of_text|> or "
              "<|endoftext|>); name it as eos_token in ", JoinPath(folder, "tokenizer_config.json")));
  }
  if (sequence.adds_bos && sequence.bos_id < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": sequences should start with bos (add_bos_token) but "
                                                         "the tokenizer names no bos token"));
  }
  return std::unique_ptr<Tokenizer>(new HfTokenizer(std::move(spec), sequence));
}

// Note [Our own tokenizer.model reader] (sentencepiece_model.h): the file is
// read without libsentencepiece, so dsrank and dsgen can use it too. The
// sequence is framed as Llama 2's SentencePiece does by default: bos before,
// no eos after, unless tokenizer_config.json says otherwise; its bos_token
// and eos_token must be the model's own.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerModel(const std::string& path,
                                                              const std::string& folder) {
  DS_ASSIGN_OR_RETURN(TokenizerConfig config, ReadTokenizerConfig(folder));
  DS_ASSIGN_OR_RETURN(HfTokenizerSpec spec, ReadSentencePieceModel(path));
  HfSequenceTokens sequence;
  sequence.bos_id = spec.template_bos.value_or(-1);
  sequence.eos_id = spec.template_eos.value_or(-1);
  sequence.adds_bos = config.add_bos_token.value_or(true);
  sequence.adds_eos = config.add_eos_token.value_or(false);
  for (auto [key, token, id] : {std::tuple{"bos_token", config.bos_token, sequence.bos_id},
                                std::tuple{"eos_token", config.eos_token, sequence.eos_id}}) {
    if (token.has_value() && SpecTokenId(spec, *token) != std::optional<int32_t>(id)) {
      return absl::InvalidArgumentError(absl::StrCat(JoinPath(folder, "tokenizer_config.json"), ": ", key, " \"",
                                                     *token, "\" is not the ", key, " of ", path));
    }
  }
  if (sequence.adds_bos && sequence.bos_id < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": sequences should start with bos (add_bos_token) but "
                                                         "the model has no bos piece"));
  }
  return std::unique_ptr<Tokenizer>(new HfTokenizer(std::move(spec), sequence));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& path) {
  FileSystem& fs = FileSystem::Default();  // not std::filesystem (fs/file_system.h says why)
  if (fs.IsDirectory(path)) {
    for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
      const std::string file = JoinPath(path, name);
      if (fs.Exists(file)) return LoadModelTokenizer(file);
    }
    return absl::NotFoundError(absl::StrCat(path, ": the folder holds no tokenizer.json or tokenizer.model"));
  }
  if (!fs.Exists(path)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or folder (a tokenizer.json, a tokenizer.model "
                                                  "or a model folder holding one)"));
  }
  const std::string folder = ParentDirectory(path);
  if (absl::EndsWith(path, ".json")) return LoadTokenizerJson(path, folder);
  if (absl::EndsWith(path, ".model")) return LoadTokenizerModel(path, folder);
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": not a tokenizer file (expected a name ending in .json or .model, or a model folder)"));
}

}  // namespace dslaunch::runtime

// A model folder's own chat template, and the tokens its generation stops at.
//
// Note [The folder's chat template]
// dsserve without --chat_template serves the chat template the folder
// carries, as transformers' apply_chat_template and vLLM do: a
// chat_template.jinja file (newer transformers), else tokenizer_config.json's
// "chat_template" (a string, or a list of {"name", "template"} of which
// "default" is used). It is Jinja (Note [Chat templates in Jinja]), rendered
// with the messages, add_generation_prompt true, tools none, and the special
// tokens' texts tokenizer_config.json names (bos_token, eos_token, unk_token,
// pad_token: a string or {"content": ...}); the text is then encoded with
// special tokens allowed and nothing added, as apply_chat_template does.
// A template that does not parse stops dsserve before it serves, naming the
// file and line. generation_config.json's eos_token_id (one id or a list)
// adds the tokens generation stops at (Llama 3's <|eot_id|> beside
// <|end_of_text|>), as transformers' generate and vLLM stop.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/serve/jinja_template.h"
#include "runtime/serve/jinja_value.h"

namespace dslaunch::runtime {

struct JinjaChatTemplate {
  JinjaTemplate jinja;
  JinjaValue::Dict special_tokens;  // bos_token, eos_token, ... as texts
};

// nullopt: the folder has no chat template. Errors name the file and key.
absl::StatusOr<std::optional<JinjaChatTemplate>> ReadFolderChatTemplate(const std::string& folder);
// A Jinja template file (--chat_template FILE.jinja), with the folder's
// special tokens.
absl::StatusOr<JinjaChatTemplate> ReadJinjaChatTemplateFile(const std::string& path, const std::string& folder);
// generation_config.json's eos_token_id; empty without the file or the key.
absl::StatusOr<std::vector<int64_t>> ReadGenerationStopTokens(const std::string& folder);

}  // namespace dslaunch::runtime

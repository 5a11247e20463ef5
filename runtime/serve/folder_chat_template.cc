#include "runtime/serve/folder_chat_template.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/bounded_file.h"
#include "common/status_macros.h"
#include "runtime/fs/file_system.h"
#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {
namespace {

constexpr size_t kMaxConfigBytes = size_t{64} << 20;  // tokenizer_config.json may hold a whole vocabulary

// Not std::filesystem: fs/file_system.h says why.
bool Exists(const std::string& path) { return FileSystem::Default().Exists(path); }

// tokenizer_config.json as JSON; nullopt without the file.
absl::StatusOr<std::optional<JsonValue>> ReadTokenizerConfigJson(const std::string& folder) {
  const std::string path = JoinPath(folder, "tokenizer_config.json");
  if (!Exists(path)) return std::optional<JsonValue>();
  DS_ASSIGN_OR_RETURN(std::string text, ReadConfigFile(path, "tokenizer_config.json", kMaxConfigBytes));
  DS_ASSIGN_OR_RETURN(JsonValue root, ParseJson(text, path));
  if (!root.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": must hold a JSON object"));
  return std::optional<JsonValue>(std::move(root));
}

absl::StatusOr<JinjaValue::Dict> SpecialTokens(const std::optional<JsonValue>& config, const std::string& path) {
  JinjaValue::Dict tokens;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    const JsonValue* value = config ? config->Find(key) : nullptr;
    if (value == nullptr || value->is_null()) continue;
    if (value->is_object() && value->Find("content") != nullptr && value->Find("content")->is_string()) {
      value = value->Find("content");
    }
    if (!value->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " must be a string or {\"content\": string}, not ",
                                                     JsonValue::TypeName(value->type())));
    }
    tokens.emplace_back(key, JinjaValue::String(value->string_value()));
  }
  return tokens;
}

}  // namespace

absl::StatusOr<std::optional<JinjaChatTemplate>> ReadFolderChatTemplate(const std::string& folder) {
  const std::string config_path = JoinPath(folder, "tokenizer_config.json");
  DS_ASSIGN_OR_RETURN(std::optional<JsonValue> config, ReadTokenizerConfigJson(folder));
  DS_ASSIGN_OR_RETURN(JinjaValue::Dict special, SpecialTokens(config, config_path));
  std::string source, origin;
  if (const std::string file = JoinPath(folder, "chat_template.jinja"); Exists(file)) {
    DS_ASSIGN_OR_RETURN(source, ReadConfigFile(file, "chat template", kMaxConfigBytes));
    origin = file;
  } else {
    const JsonValue* value = config ? config->Find("chat_template") : nullptr;
    if (value == nullptr || value->is_null()) return std::optional<JinjaChatTemplate>();
    origin = config_path + " (chat_template)";
    if (value->is_string()) {
      source = value->string_value();
    } else if (value->is_array()) {
      for (const JsonValue& named : value->items()) {
        const JsonValue* name = named.Find("name");
        const JsonValue* text = named.Find("template");
        if (name == nullptr || text == nullptr || !name->is_string() || !text->is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(
              config_path, ": chat_template: a list's items must be {\"name\": string, \"template\": string}"));
        }
        if (name->string_value() == "default") source = text->string_value();
      }
      if (source.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            config_path, ": chat_template: no template named \"default\" in the list (give --chat_template FILE)"));
      }
      origin = config_path + " (chat_template \"default\")";
    } else {
      return absl::InvalidArgumentError(absl::StrCat(config_path, ": chat_template must be a string or a list, not ",
                                                     JsonValue::TypeName(value->type())));
    }
  }
  DS_ASSIGN_OR_RETURN(JinjaTemplate jinja, JinjaTemplate::Parse(source, origin));
  return std::optional<JinjaChatTemplate>(JinjaChatTemplate{std::move(jinja), std::move(special)});
}

absl::StatusOr<JinjaChatTemplate> ReadJinjaChatTemplateFile(const std::string& path, const std::string& folder) {
  DS_ASSIGN_OR_RETURN(std::string source, ReadConfigFile(path, "--chat_template", kMaxConfigBytes));
  DS_ASSIGN_OR_RETURN(JinjaTemplate jinja, JinjaTemplate::Parse(source, path));
  DS_ASSIGN_OR_RETURN(std::optional<JsonValue> config, ReadTokenizerConfigJson(folder));
  DS_ASSIGN_OR_RETURN(JinjaValue::Dict special, SpecialTokens(config, JoinPath(folder, "tokenizer_config.json")));
  return JinjaChatTemplate{std::move(jinja), std::move(special)};
}

absl::StatusOr<std::vector<int64_t>> ReadGenerationStopTokens(const std::string& folder) {
  const std::string path = JoinPath(folder, "generation_config.json");
  std::vector<int64_t> ids;
  if (!Exists(path)) return ids;
  DS_ASSIGN_OR_RETURN(std::string text, ReadConfigFile(path, "generation_config.json"));
  DS_ASSIGN_OR_RETURN(JsonValue root, ParseJson(text, path));
  const JsonValue* value = root.is_object() ? root.Find("eos_token_id") : nullptr;
  if (value == nullptr || value->is_null()) return ids;
  std::vector<JsonValue> listed = value->is_array() ? value->items() : std::vector<JsonValue>{*value};
  for (const JsonValue& id : listed) {
    if (!id.is_number() || id.number_value() < 0 || id.number_value() != static_cast<double>(static_cast<int64_t>(id.number_value()))) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": eos_token_id must be a token id or a list of them"));
    }
    ids.push_back(static_cast<int64_t>(id.number_value()));
  }
  return ids;
}

}  // namespace dslaunch::runtime

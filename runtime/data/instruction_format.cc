#include "runtime/data/instruction_format.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/data/json_text.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {
namespace {

// A chat template is a few lines of text.
constexpr int64_t kMaxChatTemplateBytes = 1 << 20;

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("field '", field, "': ", what));
}

// The string at record[name]; `optional` fields may be missing or null ("").
absl::StatusOr<std::string> StringField(const YAML::Node& object, const std::string& name,
                                        absl::string_view shown_name, bool optional = false) {
  const YAML::Node value = object[name];
  if (!value.IsDefined() || value.IsNull()) {
    if (optional) return std::string();
    return FieldError(shown_name, value.IsDefined() ? "is null, expected a string" : "missing");
  }
  if (!IsJsonString(value)) {
    return FieldError(shown_name, absl::StrCat("expected a string, got ", DescribeJsonType(value)));
  }
  return value.Scalar();
}

absl::StatusOr<std::string> NonEmptyStringField(const YAML::Node& object, const std::string& name,
                                                absl::string_view shown_name) {
  absl::StatusOr<std::string> value = StringField(object, name, shown_name);
  if (value.ok() && value->empty()) return FieldError(shown_name, "is empty");
  return value;
}

void Append(std::vector<TextSegment>& segments, std::string text, bool trained, bool template_text = false) {
  if (!text.empty()) segments.push_back({std::move(text), trained, template_text});
}

absl::StatusOr<std::vector<TextSegment>> RenderChat(const YAML::Node& record, const ChatTemplate& chat) {
  const YAML::Node messages = record["messages"];
  if (!messages.IsDefined()) return FieldError("messages", "missing");
  if (!messages.IsSequence()) {
    return FieldError("messages", absl::StrCat("expected a list of {role, content}, got ", DescribeJsonType(messages)));
  }
  std::vector<TextSegment> segments;
  bool has_assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string at = absl::StrCat("messages[", i, "]");
    const YAML::Node message = messages[i];
    if (!message.IsMap()) return FieldError(at, absl::StrCat("expected an object, got ", DescribeJsonType(message)));
    absl::StatusOr<std::string> role = StringField(message, "role", absl::StrCat(at, ".role"));
    if (!role.ok()) return role.status();
    const RoleTemplate* role_template = nullptr;
    if (*role == "user") {
      role_template = &chat.user;
    } else if (*role == "assistant") {
      role_template = &chat.assistant;
    } else if (*role == "system") {
      if (!chat.system.has_value()) {
        return FieldError(absl::StrCat(at, ".role"), "'system', but the chat template has no system role");
      }
      role_template = &*chat.system;
    } else {
      return FieldError(absl::StrCat(at, ".role"),
                        absl::StrCat("'", *role, "' is not a role (expected system, user or assistant)"));
    }
    const bool assistant = *role == "assistant";
    absl::StatusOr<std::string> content =
        assistant ? NonEmptyStringField(message, "content", absl::StrCat(at, ".content"))
                  : StringField(message, "content", absl::StrCat(at, ".content"));
    if (!content.ok()) return content.status();
    has_assistant |= assistant;
    Append(segments, role_template->prefix, false, /*template_text=*/true);
    Append(segments, std::move(*content), assistant);
    Append(segments, role_template->suffix, assistant, /*template_text=*/true);
  }
  if (!has_assistant) return FieldError("messages", "has no assistant turn (nothing to train on)");
  return segments;
}

absl::StatusOr<RoleTemplate> ReadRole(const YAML::Node& node, const std::string& path, const std::string& role) {
  if (!node.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": key '", role, "': expected a mapping of prefix and suffix"));
  }
  RoleTemplate result;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.Scalar();
    std::string* field = key == "prefix" ? &result.prefix : key == "suffix" ? &result.suffix : nullptr;
    if (field == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": key '", role, ".", key, "' is unknown (expected prefix or suffix)"));
    }
    if (!it->second.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": key '", role, ".", key, "': expected a string"));
    }
    *field = it->second.Scalar();
  }
  return result;
}

}  // namespace

absl::StatusOr<RecordFormat> ParseRecordFormat(absl::string_view name) {
  if (name == "alpaca") return RecordFormat::kAlpaca;
  if (name == "prompt_response") return RecordFormat::kPromptResponse;
  if (name == "chat") return RecordFormat::kChat;
  return absl::InvalidArgumentError(
      absl::StrCat("record format '", name, "' is unknown (expected alpaca, prompt_response or chat)"));
}

absl::string_view RecordFormatName(RecordFormat format) {
  switch (format) {
    case RecordFormat::kAlpaca: return "alpaca";
    case RecordFormat::kPromptResponse: return "prompt_response";
    case RecordFormat::kChat: return "chat";
  }
  return "?";
}

absl::StatusOr<ChatTemplate> ReadChatTemplateFile(const std::string& path) {
  absl::StatusOr<std::string> text = FileSystem::Default().ReadFile(path, kMaxChatTemplateBytes);
  if (!text.ok()) return text.status();
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", e.mark.line + 1, ": ", e.msg));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": expected a mapping with user, assistant (and optional system) roles; Jinja chat templates "
              "are not interpreted"));
  }
  ChatTemplate chat;
  std::set<std::string> seen;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string role = it->first.Scalar();
    RoleTemplate* target = role == "user" ? &chat.user : role == "assistant" ? &chat.assistant : nullptr;
    if (role == "system") {
      chat.system.emplace();
      target = &*chat.system;
    }
    if (target == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": key '", role, "' is unknown (expected system, user or assistant)"));
    }
    absl::StatusOr<RoleTemplate> read = ReadRole(it->second, path, role);
    if (!read.ok()) return read.status();
    *target = std::move(*read);
    seen.insert(role);
  }
  for (const char* role : {"user", "assistant"}) {
    if (!seen.count(role)) return absl::InvalidArgumentError(absl::StrCat(path, ": key '", role, "' is missing"));
  }
  return chat;
}

std::string AlpacaPrompt(absl::string_view instruction, absl::string_view input) {
  if (input.empty()) {
    return absl::StrCat(
        "Below is an instruction that describes a task. Write a response that appropriately completes the "
        "request.\n\n### Instruction:\n",
        instruction, "\n\n### Response:");
  }
  return absl::StrCat(
      "Below is an instruction that describes a task, paired with an input that provides further context. "
      "Write a response that appropriately completes the request.\n\n### Instruction:\n",
      instruction, "\n\n### Input:\n", input, "\n\n### Response:");
}

absl::StatusOr<std::vector<TextSegment>> RenderRecord(const YAML::Node& record,
                                                      const RecordFormatOptions& options) {
  if (!record.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat("expected a JSON object, got ", DescribeJsonType(record)));
  }
  std::vector<TextSegment> segments;
  switch (options.format) {
    case RecordFormat::kAlpaca: {
      absl::StatusOr<std::string> instruction = NonEmptyStringField(record, "instruction", "instruction");
      if (!instruction.ok()) return instruction.status();
      absl::StatusOr<std::string> input = StringField(record, "input", "input", /*optional=*/true);
      if (!input.ok()) return input.status();
      absl::StatusOr<std::string> output = NonEmptyStringField(record, "output", "output");
      if (!output.ok()) return output.status();
      Append(segments, AlpacaPrompt(*instruction, *input), false);
      Append(segments, std::move(*output), true);
      return segments;
    }
    case RecordFormat::kPromptResponse: {
      absl::StatusOr<std::string> prompt = NonEmptyStringField(record, options.prompt_field, options.prompt_field);
      if (!prompt.ok()) return prompt.status();
      absl::StatusOr<std::string> response =
          NonEmptyStringField(record, options.response_field, options.response_field);
      if (!response.ok()) return response.status();
      Append(segments, std::move(*prompt), false);
      Append(segments, std::move(*response), true);
      return segments;
    }
    case RecordFormat::kChat:
      return RenderChat(record, options.chat_template);
  }
  return absl::InternalError("unknown record format");
}

}  // namespace dslaunch::runtime

#include "runtime/serve/chat_prompt.h"

#include "absl/strings/str_cat.h"
#include "runtime/data/instruction_encoding.h"
#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {

absl::StatusOr<ChatPrompt> BuildChatPrompt(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                           const std::vector<ChatMessage>& messages) {
  if (messages.empty()) return absl::InvalidArgumentError("messages: no messages");
  if (messages.back().role == "assistant") {
    return absl::InvalidArgumentError(absl::StrCat("messages[", messages.size() - 1,
                                                   "]: the conversation ends with the assistant's message; end it "
                                                   "with a user message"));
  }
  ChatPrompt prompt;
  auto add = [&](const std::vector<int32_t>& ids) { prompt.tokens.insert(prompt.tokens.end(), ids.begin(), ids.end()); };
  if (tokenizer.bos_id() >= 0) prompt.tokens.push_back(tokenizer.bos_id());
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    if (message.role == "tool" || !message.tool_calls.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "messages[", i, "]: a tool conversation needs a chat template that writes tool calls (the model folder's "
          "Jinja template); this server's is the job file's prefix and suffix form"));
    }
    const RoleTemplate* role = nullptr;
    if (message.role == "system") {
      if (!chat_template.system) {
        return absl::InvalidArgumentError(absl::StrCat("messages[", i, "].role: the chat template has no system role"));
      }
      role = &*chat_template.system;
    } else if (message.role == "user") {
      role = &chat_template.user;
    } else if (message.role == "assistant") {
      role = &chat_template.assistant;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("messages[", i, "].role: '", message.role, "' is not a role"));
    }
    // Empty pieces are left out, as training's segments are.
    if (!role->prefix.empty()) add(EncodeTemplateText(tokenizer, role->prefix));
    if (!message.content.empty()) add(tokenizer.EncodePlainText(message.content));
    if (!role->suffix.empty()) add(EncodeTemplateText(tokenizer, role->suffix));
  }
  if (!chat_template.assistant.prefix.empty()) add(EncodeTemplateText(tokenizer, chat_template.assistant.prefix));

  if (tokenizer.eos_id() >= 0) prompt.stop_tokens.push_back(tokenizer.eos_id());
  const std::string& end_of_turn = chat_template.assistant.suffix;
  if (!end_of_turn.empty()) {
    const std::vector<int32_t> ids = EncodeTemplateText(tokenizer, end_of_turn);
    const std::optional<int32_t> special = tokenizer.TokenId(end_of_turn);
    if (ids.size() == 1 && special && *special == ids[0]) {
      if (ids[0] != tokenizer.eos_id()) prompt.stop_tokens.push_back(ids[0]);
    } else {
      prompt.stop_strings.push_back(end_of_turn);
    }
  }
  return prompt;
}

absl::StatusOr<std::string> RenderJinjaChat(const JinjaChatTemplate& chat_template,
                                            const std::vector<ChatMessage>& messages, const JsonValue* tools) {
  JinjaValue::List list;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    // Keys a template tests with `in` ('tool_calls' in message) are there
    // only when the message has them, as in the request.
    JinjaValue::Dict dict = {{"role", JinjaValue::String(message.role)},
                             {"content", message.content_null ? JinjaValue::None()
                                                              : JinjaValue::String(message.content)}};
    if (!message.name.empty()) dict.emplace_back("name", JinjaValue::String(message.name));
    if (!message.tool_calls.empty()) {
      JinjaValue::List calls;
      for (size_t c = 0; c < message.tool_calls.size(); ++c) {
        const ChatToolCall& call = message.tool_calls[c];
        // The arguments as an object (vLLM's json.loads): templates write them with tojson.
        auto arguments = ParseJson(call.arguments, absl::StrCat("messages[", i, "].tool_calls[", c, "]"));
        if (!arguments.ok()) return absl::InvalidArgumentError(absl::StrCat("messages: ", arguments.status().message()));
        calls.push_back(JinjaValue::MakeDict(
            {{"id", JinjaValue::String(call.id)},
             {"type", JinjaValue::String("function")},
             {"function", JinjaValue::MakeDict({{"name", JinjaValue::String(call.name)},
                                                {"arguments", JinjaValueFromJson(*arguments)}})}}));
      }
      dict.emplace_back("tool_calls", JinjaValue::MakeList(std::move(calls)));
    }
    if (!message.tool_call_id.empty()) dict.emplace_back("tool_call_id", JinjaValue::String(message.tool_call_id));
    list.push_back(JinjaValue::MakeDict(std::move(dict)));
  }
  JinjaValue::Dict variables = chat_template.special_tokens;
  variables.emplace_back("messages", JinjaValue::MakeList(std::move(list)));
  variables.emplace_back("add_generation_prompt", JinjaValue::Bool(true));
  variables.emplace_back("tools", tools != nullptr ? JinjaValueFromJson(*tools) : JinjaValue::None());
  auto text = chat_template.jinja.Render(variables);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("messages: ", text.status().message()));
  return text;
}

absl::StatusOr<ChatPrompt> BuildJinjaChatPrompt(const Tokenizer& tokenizer, const JinjaChatTemplate& chat_template,
                                                const std::vector<ChatMessage>& messages, const JsonValue* tools) {
  auto text = RenderJinjaChat(chat_template, messages, tools);
  if (!text.ok()) return text.status();
  ChatPrompt prompt;
  for (int32_t id : EncodeTemplateText(tokenizer, *text)) prompt.tokens.push_back(id);
  if (tokenizer.eos_id() >= 0) prompt.stop_tokens.push_back(tokenizer.eos_id());
  return prompt;
}

}  // namespace dslaunch::runtime

// A chat request's messages -> the prompt's token ids and what ends the
// assistant's turn.
//
// Note [Chat prompts]
// A served conversation is encoded exactly as training encodes a chat record
// (runtime/data/instruction_encoding.h): bos where the tokenizer has one,
// then each message as its role's prefix (template text: special tokens
// allowed), its content (plain text: a user's "<|eot_id|>" stays characters)
// and its role's suffix, each piece encoded apart; then the assistant's
// prefix, after which the model writes. The template is the job file's
// data.chat_template form (prefix and suffix per role). The assistant's turn
// ends at eos, and at the assistant suffix: as a stop token when it is one
// special token ("<|eot_id|>"), otherwise as a stop string. A model folder's
// own Jinja template is rendered instead (Note [The folder's chat template]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/data/instruction_format.h"
#include "runtime/serve/folder_chat_template.h"
#include "runtime/serve/openai_request.h"
#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {

struct ChatPrompt {
  std::vector<int64_t> tokens;
  std::vector<int64_t> stop_tokens;
  std::vector<std::string> stop_strings;
};

// InvalidArgument naming the message for a role the template lacks (system,
// tool), a message with tool calls, or a conversation that does not end with
// a user or system message.
absl::StatusOr<ChatPrompt> BuildChatPrompt(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                           const std::vector<ChatMessage>& messages);

// Note [The folder's chat template]: the messages rendered (add_generation_prompt
// true; `tools` the request's tools, or none: Note [Tool calls]; an
// assistant's tool calls with their arguments as objects, a tool's message
// with its tool_call_id) and encoded with special tokens allowed and nothing
// added; the turn ends at eos. InvalidArgument "messages: ..." when the
// template raises or fails (its message and line).
absl::StatusOr<ChatPrompt> BuildJinjaChatPrompt(const Tokenizer& tokenizer, const JinjaChatTemplate& chat_template,
                                                const std::vector<ChatMessage>& messages,
                                                const JsonValue* tools = nullptr);
// The text BuildJinjaChatPrompt encodes.
absl::StatusOr<std::string> RenderJinjaChat(const JinjaChatTemplate& chat_template,
                                            const std::vector<ChatMessage>& messages,
                                            const JsonValue* tools = nullptr);

}  // namespace dslaunch::runtime

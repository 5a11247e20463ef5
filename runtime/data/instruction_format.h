// Instruction records (one parsed JSON object each) -> the text segments of a
// training sequence, each marked trained (in the loss) or not.
//
// Note [Instruction formats]
//   alpaca           {"instruction", "input" (optional, may be empty), "output"}:
//                    the Stanford Alpaca prompt (AlpacaPrompt), then the output.
//   prompt_response  {<prompt_field>, <response_field>} (default "prompt",
//                    "response"): the prompt text as is, then the response.
//   chat             {"messages": [{"role", "content"}, ...]}, roles system,
//                    user, assistant: each turn is rendered as
//                    prefix + content + suffix of its role's ChatTemplate entry.
//                    Only assistant turns are trained on: their content and
//                    their suffix (which ends the turn, e.g. Llama-3's
//                    <|eot_id|>, so the model learns to stop); their prefix
//                    (the header naming the role) is not.
// In every format the prompt side is not trained on, the response side is.
// A record that breaks these rules (missing field, wrong type, an empty
// instruction/prompt/response, a chat without an assistant turn, a role the
// template does not give) is a bad record; the error names the field.
//
// Training's chat template is the explicit prefix/suffix strings of each
// role (a record's loss mask needs each segment's role); dsserve also renders
// a folder's Jinja template (Note [The folder's chat template],
// runtime/serve/folder_chat_template.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace dslaunch::runtime {

enum class RecordFormat { kAlpaca, kPromptResponse, kChat };

// "alpaca" | "prompt_response" | "chat"; errors list the names.
absl::StatusOr<RecordFormat> ParseRecordFormat(absl::string_view name);
absl::string_view RecordFormatName(RecordFormat format);

// The text around one role's turns. Special tokens are written as their text
// ("<|eot_id|>"): Note [Template text and special tokens].
struct RoleTemplate {
  std::string prefix;
  std::string suffix;
};

struct ChatTemplate {
  std::optional<RoleTemplate> system;  // absent: records with a system turn are bad records
  RoleTemplate user;
  RoleTemplate assistant;
};

// Reads a chat template file (YAML or JSON):
//   system:    {prefix: "...", suffix: "..."}   # optional
//   user:      {prefix: "...", suffix: "..."}
//   assistant: {prefix: "...", suffix: "..."}
// A missing prefix or suffix is "". Unknown keys, non-string values and a
// missing user or assistant role are errors naming the file and key.
absl::StatusOr<ChatTemplate> ReadChatTemplateFile(const std::string& path);

struct RecordFormatOptions {
  RecordFormat format = RecordFormat::kAlpaca;
  std::string prompt_field = "prompt";      // prompt_response
  std::string response_field = "response";  // prompt_response
  ChatTemplate chat_template;               // chat
};

// One piece of a sequence's text.
struct TextSegment {
  std::string text;
  bool trained = false;
  // A chat template's prefix or suffix, which may write special tokens
  // (Note [Template text and special tokens]); record text never is, so a
  // record cannot smuggle in a turn boundary.
  bool template_text = false;
};

// The Stanford Alpaca prompt, ending with "### Response:" (no newline after
// it); `input` empty selects the variant without the Input section.
std::string AlpacaPrompt(absl::string_view instruction, absl::string_view input);

// The segments of one record, in order; segments with empty text are left
// out. Errors name the field ("field 'messages[2].role': ...") and are
// InvalidArgument.
absl::StatusOr<std::vector<TextSegment>> RenderRecord(const YAML::Node& record,
                                                      const RecordFormatOptions& options);

}  // namespace dslaunch::runtime

// Tool calls read back out of a model's text, for OpenAI's function calling
// on /v1/chat/completions.
//
// Note [Tool calls]
// A request's `tools` reach the model through the folder's chat template
// (its `tools` variable, as transformers' apply_chat_template passes them);
// the model answers a call in the text form its template taught it, and
// dsserve --tool_call_parser FORMAT reads that form back, as vLLM's
// --tool-call-parser does:
//  - hermes (Hermes 2 Pro, Qwen2.5, Qwen3): each call a JSON object
//    {"name": ..., "arguments": {...}} between <tool_call> and </tool_call>
//    (the last one may be cut by the end of the turn); the text around
//    them (what is not blank) is the message's content;
//  - llama3_json (Llama 3.1-3.3's JSON tool calling): the whole answer,
//    after an optional <|python_tag|>, is one JSON object {"name": ...,
//    "parameters": {...}} ("arguments" also read), or several separated by
//    ';'; no content.
// A key the arguments repeat takes its last value, in its first place (as
// json.loads reads it; an object of any keys may repeat one under
// constrained output). A call is kept only when every call of the answer parses, names one of the
// request's tools, and has an object of arguments; otherwise the whole text
// is the message's content, as if no call were made (a truncated call, a
// made-up tool). The arguments come back as JSON text written as Python's
// json.dumps writes it ({"city": "Paris"}), what vLLM returns.
//
// Streaming: text is released as content up to where a call may begin; from
// there it is held until the choice ends, then read as above: the calls go
// out as one delta (each call whole: its index, id, name and arguments), or
// the held text goes out as content.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

enum class ToolCallFormat { kHermes, kLlama3Json };

// "hermes" or "llama3_json"; InvalidArgument naming the choices otherwise.
absl::StatusOr<ToolCallFormat> ParseToolCallFormat(const std::string& name);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text
};

struct ToolCallReading {
  std::string content;                // the message's text (all of it when no call was read)
  std::vector<ParsedToolCall> calls;  // empty: no call
};

// The calls in a finished answer `text`, of the tools named `tool_names`.
ToolCallReading ReadToolCalls(ToolCallFormat format, const std::string& text,
                              const std::vector<std::string>& tool_names);

// How many leading bytes of `text` (an answer so far) are content whatever
// comes next: the rest may be, or begin, a call. `from`: bytes already known
// to be content (the search for a call starts there).
size_t ContentBeforeAnyCall(ToolCallFormat format, const std::string& text, size_t from = 0);

// A streamed answer's text, piece by piece: content goes out up to where a
// call may begin; the rest is read when the answer ends.
class ToolCallStream {
 public:
  ToolCallStream(ToolCallFormat format, std::vector<std::string> tool_names)
      : format_(format), tool_names_(std::move(tool_names)) {}

  // The content `piece` lets out now (perhaps held text from before).
  std::string Add(const std::string& piece);
  // At the answer's end: the content not yet let out, and the calls (none:
  // the held text is all content).
  ToolCallReading Finish();
  // Bytes of the answer held back so far.
  size_t held() const { return answer_.size() - released_; }

 private:
  ToolCallFormat format_;
  std::vector<std::string> tool_names_;
  std::string answer_;
  size_t released_ = 0;
};

}  // namespace dslaunch::runtime

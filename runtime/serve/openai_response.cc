#include "runtime/serve/openai_response.h"

#include <charconv>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_quote.h"

namespace dslaunch::runtime {
namespace {

std::string Head(const ResponseHeader& header, const char* object) {
  return absl::StrCat("{\"id\":", JsonQuote(header.id), ",\"object\":\"", object, "\",\"created\":", header.created,
                      ",\"model\":", JsonQuote(header.model));
}

std::string FinishReasonJson(const std::string& reason) { return reason.empty() ? "null" : JsonQuote(reason); }

std::string Usage(const TokenUsage& usage) {
  return absl::StrCat("{\"prompt_tokens\":", usage.prompt_tokens, ",\"completion_tokens\":", usage.completion_tokens,
                      ",\"total_tokens\":", usage.prompt_tokens + usage.completion_tokens, "}");
}

// The shortest decimal that reads back as the same double.
std::string Logprob(double value) {
  if (!std::isfinite(value)) return "-9999.0";
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

// The text's bytes as a JSON array of numbers.
std::string Bytes(const std::string& text) {
  std::vector<std::string> bytes;
  for (unsigned char c : text) bytes.push_back(absl::StrCat(static_cast<int>(c)));
  return absl::StrCat("[", absl::StrJoin(bytes, ","), "]");
}

// Completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"}:
// top_logprobs an object per token keyed by text (a text two tokens share
// is kept once, with the higher log-probability); a prompt's first token
// has null in both.
std::string CompletionLogprobs(const std::optional<std::vector<TokenLogprobs>>& logprobs) {
  if (!logprobs) return "null";
  std::vector<std::string> tokens, values, tops, offsets;
  for (const TokenLogprobs& entry : *logprobs) {
    tokens.push_back(JsonQuote(entry.chosen.text));
    offsets.push_back(absl::StrCat(entry.text_offset));
    if (!entry.scored) {
      values.push_back("null");
      tops.push_back("null");
      continue;
    }
    values.push_back(Logprob(entry.chosen.logprob));
    std::vector<std::string> fields;
    std::set<std::string> seen;
    for (const TokenText& top : entry.top) {
      const std::string key = JsonQuote(top.text);  // texts that differ only in invalid bytes share a key
      if (!seen.insert(key).second) continue;
      fields.push_back(absl::StrCat(key, ":", Logprob(top.logprob)));
    }
    tops.push_back(absl::StrCat("{", absl::StrJoin(fields, ","), "}"));
  }
  return absl::StrCat("{\"tokens\":[", absl::StrJoin(tokens, ","), "],\"token_logprobs\":[",
                      absl::StrJoin(values, ","), "],\"top_logprobs\":[", absl::StrJoin(tops, ","),
                      "],\"text_offset\":[", absl::StrJoin(offsets, ","), "]}");
}

std::string ChatToken(const TokenText& token) {
  return absl::StrCat("{\"token\":", JsonQuote(token.text), ",\"logprob\":", Logprob(token.logprob),
                      ",\"bytes\":", Bytes(token.text));
}

// Chat's {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
std::string ChatLogprobs(const std::optional<std::vector<TokenLogprobs>>& logprobs) {
  if (!logprobs) return "null";
  std::vector<std::string> content;
  for (const TokenLogprobs& entry : *logprobs) {
    std::vector<std::string> tops;
    for (const TokenText& top : entry.top) tops.push_back(absl::StrCat(ChatToken(top), "}"));
    content.push_back(absl::StrCat(ChatToken(entry.chosen), ",\"top_logprobs\":[", absl::StrJoin(tops, ","), "]}"));
  }
  return absl::StrCat("{\"content\":[", absl::StrJoin(content, ","), "]}");
}

std::string CompletionChoice(const ChoiceOutput& choice) {
  return absl::StrCat("{\"index\":", choice.index, ",\"text\":", JsonQuote(choice.text),
                      ",\"logprobs\":", CompletionLogprobs(choice.logprobs),
                      ",\"finish_reason\":", FinishReasonJson(choice.finish_reason), "}");
}

}  // namespace

std::string ErrorJson(const ApiError& error) {
  return absl::StrCat("{\"error\":{\"message\":", JsonQuote(error.message), ",\"type\":", JsonQuote(error.type),
                      ",\"param\":", error.param.empty() ? "null" : JsonQuote(error.param),
                      ",\"code\":", error.code.empty() ? "null" : JsonQuote(error.code), "}}");
}

std::string CompletionJson(const ResponseHeader& header, const std::vector<ChoiceOutput>& choices,
                           const TokenUsage& usage) {
  std::vector<std::string> parts;
  for (const ChoiceOutput& choice : choices) parts.push_back(CompletionChoice(choice));
  return absl::StrCat(Head(header, "text_completion"), ",\"choices\":[", absl::StrJoin(parts, ","),
                      "],\"usage\":", Usage(usage), "}");
}

std::string CompletionChunkJson(const ResponseHeader& header, const ChoiceOutput& choice) {
  return absl::StrCat(Head(header, "text_completion"), ",\"choices\":[", CompletionChoice(choice), "]}");
}

// [{"index", "id", "type", "function": {"name", "arguments"}}]; `indexed`:
// with each call's index (a streamed delta's form).
std::string ToolCalls(const std::vector<ToolCallOutput>& calls, bool indexed) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < calls.size(); ++i) {
    parts.push_back(absl::StrCat("{", indexed ? absl::StrCat("\"index\":", i, ",") : "", "\"id\":", JsonQuote(calls[i].id),
                                 ",\"type\":\"function\",\"function\":{\"name\":", JsonQuote(calls[i].name),
                                 ",\"arguments\":", JsonQuote(calls[i].arguments), "}}"));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

std::string ChatCompletionJson(const ResponseHeader& header, const std::vector<ChoiceOutput>& choices,
                               const TokenUsage& usage) {
  std::vector<std::string> parts;
  for (const ChoiceOutput& choice : choices) {
    const bool calls = !choice.tool_calls.empty();
    const std::string content = calls && choice.text.empty() ? "null" : JsonQuote(choice.text);
    parts.push_back(absl::StrCat("{\"index\":", choice.index, ",\"message\":{\"role\":\"assistant\",\"content\":",
                                 content, calls ? absl::StrCat(",\"tool_calls\":", ToolCalls(choice.tool_calls, false)) : "",
                                 "},\"logprobs\":", ChatLogprobs(choice.logprobs),
                                 ",\"finish_reason\":", FinishReasonJson(choice.finish_reason), "}"));
  }
  return absl::StrCat(Head(header, "chat.completion"), ",\"choices\":[", absl::StrJoin(parts, ","),
                      "],\"usage\":", Usage(usage), "}");
}

std::string ChatChunkJson(const ResponseHeader& header, const ChoiceOutput& choice,
                          const std::optional<std::string>& role, bool has_content) {
  std::string delta = "{";
  if (role) absl::StrAppend(&delta, "\"role\":", JsonQuote(*role));
  if (has_content) absl::StrAppend(&delta, role ? "," : "", "\"content\":", JsonQuote(choice.text));
  if (!choice.tool_calls.empty()) {
    absl::StrAppend(&delta, role || has_content ? "," : "", "\"tool_calls\":", ToolCalls(choice.tool_calls, true));
  }
  delta += "}";
  return absl::StrCat(Head(header, "chat.completion.chunk"), ",\"choices\":[{\"index\":", choice.index,
                      ",\"delta\":", delta, ",\"logprobs\":", ChatLogprobs(choice.logprobs),
                      ",\"finish_reason\":", FinishReasonJson(choice.finish_reason), "}]}");
}

std::string UsageChunkJson(const ResponseHeader& header, const char* object, const TokenUsage& usage) {
  return absl::StrCat(Head(header, object), ",\"choices\":[],\"usage\":", Usage(usage), "}");
}

std::string ServerSentEvent(const std::string& json) { return absl::StrCat("data: ", json, "\n\n"); }

}  // namespace dslaunch::runtime

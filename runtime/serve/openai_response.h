// The JSON bodies an OpenAI-compatible server answers with: completions,
// chat completions, their streamed chunks (server-sent events) and errors,
// in the shapes OpenAI's API reference gives (what the openai Python client
// and curl users parse).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/serve/openai_request.h"

namespace dslaunch::runtime {

struct TokenUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// What every response of one request shares.
struct ResponseHeader {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// {"error": {"message", "type", "param", "code"}}
std::string ErrorJson(const ApiError& error);

// A token in a response's log-probabilities: its text in context (Note [The
// text of one token]) and its log-probability (a log-probability that is
// not finite is written -9999.0, as vLLM does: JSON has no infinities).
struct TokenText {
  std::string text;
  double logprob = 0;
};
struct TokenLogprobs {
  TokenText chosen;
  std::vector<TokenText> top;  // most probable first
  int64_t text_offset = 0;     // completions: the choice's characters before this token's text
  bool scored = true;          // false: a prompt's first token (null log-probability and alternatives)
};

// A tool call of a chat choice (Note [Tool calls]): {"id", "type":
// "function", "function": {"name", "arguments"}}.
struct ToolCallOutput {
  std::string id;  // "call_..."
  std::string name;
  std::string arguments;  // JSON text
};

// One choice of a response, or a streamed piece of one.
struct ChoiceOutput {
  int64_t index = 0;
  std::string text;           // chat: the message's content (or the delta's)
  std::string finish_reason;  // empty: null
  // nullopt: "logprobs": null. Completions: {"tokens", "token_logprobs",
  // "top_logprobs", "text_offset"}; chat: {"content": [{"token", "logprob",
  // "bytes", "top_logprobs"}]}.
  std::optional<std::vector<TokenLogprobs>> logprobs;
  // Chat: the message's tool calls (its content null when `text` is empty),
  // or a delta's (each whole, "index" its place).
  std::vector<ToolCallOutput> tool_calls;
};

// object "text_completion".
std::string CompletionJson(const ResponseHeader& header, const std::vector<ChoiceOutput>& choices,
                           const TokenUsage& usage);
// A streamed piece of one choice.
std::string CompletionChunkJson(const ResponseHeader& header, const ChoiceOutput& choice);
// object "chat.completion": each choice the assistant's message.
std::string ChatCompletionJson(const ResponseHeader& header, const std::vector<ChoiceOutput>& choices,
                               const TokenUsage& usage);
// object "chat.completion.chunk" for one choice: the first carries the role,
// then content deltas (and a delta of tool calls), the last an empty delta
// and the finish reason. has_content false: no content key.
std::string ChatChunkJson(const ResponseHeader& header, const ChoiceOutput& choice,
                          const std::optional<std::string>& role, bool has_content);
// The final chunk of a stream with include_usage: no choices, the usage.
std::string UsageChunkJson(const ResponseHeader& header, const char* object, const TokenUsage& usage);

// "data: <json>\n\n", and the stream's end "data: [DONE]\n\n".
std::string ServerSentEvent(const std::string& json);
inline constexpr char kServerSentEventsDone[] = "data: [DONE]\n\n";

}  // namespace dslaunch::runtime

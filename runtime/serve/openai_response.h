// The JSON bodies an OpenAI-compatible server answers with: completions,
// chat completions, their streamed chunks (server-sent events) and errors,
// in the shapes OpenAI's API reference gives (what the openai Python client
// and curl users parse).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

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

// object "text_completion", one choice.
std::string CompletionJson(const ResponseHeader& header, const std::string& text, const std::string& finish_reason,
                           const TokenUsage& usage);
// A streamed piece: `finish_reason` empty is JSON null.
std::string CompletionChunkJson(const ResponseHeader& header, const std::string& text,
                                const std::string& finish_reason);
// object "chat.completion": the assistant's message.
std::string ChatCompletionJson(const ResponseHeader& header, const std::string& content,
                               const std::string& finish_reason, const TokenUsage& usage);
// object "chat.completion.chunk": the first carries the role, then content
// deltas, the last an empty delta and the finish reason.
std::string ChatChunkJson(const ResponseHeader& header, const std::optional<std::string>& role,
                          const std::optional<std::string>& content, const std::string& finish_reason);
// The final chunk of a stream with include_usage: no choices, the usage.
std::string UsageChunkJson(const ResponseHeader& header, const char* object, const TokenUsage& usage);

// "data: <json>\n\n", and the stream's end "data: [DONE]\n\n".
std::string ServerSentEvent(const std::string& json);
inline constexpr char kServerSentEventsDone[] = "data: [DONE]\n\n";

}  // namespace dslaunch::runtime

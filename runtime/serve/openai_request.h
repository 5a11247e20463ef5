// The bodies of OpenAI's /v1/completions and /v1/chat/completions requests,
// read strictly.
//
// Note [What an OpenAI request may say]
// A request is a JSON object (runtime/tokenizer/json_value.h, the strict
// reader). Every field OpenAI defines for these two endpoints is known here:
//  - the ones this server does are read and range-checked: model, prompt
//    (a string, an array of token ids, or an array of up to 128 of either:
//    each prompt has its n choices, indexed prompt by prompt), messages (roles system, user, assistant, tool; content a
//    string or an array of {"type": "text", "text"} parts), max_tokens (chat:
//    max_completion_tokens too), temperature (0 is greedy), top_p, seed, stop
//    (a string or up to 4), stream, stream_options.include_usage, n (up to
//    128 choices; choice i samples with seed + i), log-probabilities
//    (completions: logprobs = k, 0 to 20 alternatives per token; chat:
//    logprobs true and top_logprobs = k), completions' best_of (best_of
//    choices generated, the n of highest mean log-probability per token
//    returned; not streamed) and echo (the prompt's text before each
//    choice's), and the extensions vLLM users send: top_k,
//    repetition_penalty, ignore_eos (generate past eos: benchmarks);
//    With echo and logprobs, the prompt's tokens are scored too (Note
//    [Prompt log-probabilities], what lm-eval-harness's loglikelihood
//    requests read);
//  - the ones it does not do are accepted only at their neutral value
//    (frequency_penalty and presence_penalty 0, logit_bias empty, suffix
//    null) and otherwise refused naming the field: never silently ignored;
//  - response_format {"type": "json_object"}, {"type": "json_schema",
//    "json_schema": {"name", "schema", "strict", "description"}} (or
//    "text"), and vLLM's guided_json (a schema or its text) and
//    guided_choice constrain the output (Note [Constrained output],
//    runtime/generate/output_constraint.h; Note [JSON schemas for
//    constrained output], runtime/generate/json_schema.h): a schema with a
//    keyword the decoder cannot hold output to is refused naming it;
//  - chat's tools, tool_choice ("auto", "none", "required" or a named
//    function: the last two hold the answer to a call's form) and
//    parallel_tool_calls, with the messages of a tool
//    conversation (an assistant's tool_calls, role "tool" with its
//    tool_call_id), are read for Note [Tool calls] (tool_call_parser.h);
//    the legacy functions and function_call are refused, naming tools;
//  - user (an end-user id for abuse monitoring) is accepted and unused;
//  - any other key is an error naming it.
// Errors carry the field as OpenAI's "param" so the response can name it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "runtime/generate/output_constraint.h"
#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {

// An OpenAI-shaped error: HTTP status, "type", "param" (the field, or empty)
// and the message.
struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";
  std::string param;
  std::string message;
  std::string code;  // OpenAI's "code" (e.g. "model_not_found"); empty: null
};

// A call an assistant message made (OpenAI's message.tool_calls[i]).
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant" | "tool"
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant: the calls it made (content may then be null)
  std::string tool_call_id;              // tool: the call this answers
  bool content_null = false;  // an assistant's message of tool calls with content null or absent
  std::string name;           // the optional participant (or tool) name, for the template
};

// What both endpoints share.
struct GenerationParameters {
  std::optional<int64_t> max_tokens;  // absent: the endpoint's default
  double temperature = 1.0;           // 0: greedy
  double top_p = 1.0;
  int64_t top_k = 0;                  // 0 (or -1 in the request): every token
  double repetition_penalty = 1.0;
  std::optional<uint64_t> seed;       // absent: a fresh random seed
  std::vector<std::string> stop;      // up to 4 non-empty strings
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool ignore_eos = false;            // vLLM's: eos does not end the request
  int64_t n = 1;                      // choices returned
  int64_t best_of = 0;                // completions: choices generated (0: n)
  bool echo = false;                  // completions: the prompt's text first
  bool logprobs = false;              // each token's log-probability
  int64_t top_logprobs = 0;           // and this many alternatives (with logprobs)
  // response_format (json_object, json_schema), or vLLM's guided_json or
  // guided_choice (Note [Constrained output]), and which field gave it.
  OutputConstraint constraint;
  std::string constraint_field;
};

inline constexpr int64_t kMaxChoices = 128;

// One prompt of a completion request: text, or token ids.
struct CompletionPrompt {
  std::optional<std::string> text;
  std::vector<int64_t> ids;  // when the prompt is token ids
};

struct CompletionRequest {
  std::string model;  // empty when not given
  std::vector<CompletionPrompt> prompts;  // 1 to kMaxChoices
  GenerationParameters parameters;
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  GenerationParameters parameters;
  // Note [Tool calls] (tool_call_parser.h): the request's tools as given
  // (an array of {"type": "function", "function": {...}}: what the chat
  // template reads), their names, and tool_choice: "auto", "none",
  // "required" (the answer is a call of one of the tools) or "function"
  // (a call of tool_choice_function; OpenAI's {"type": "function",
  // "function": {"name": ...}}). The last two hold the answer to the
  // call's form (Note [Required tool calls], tool_call_form.h).
  std::optional<JsonValue> tools;
  std::vector<std::string> tool_names;
  std::string tool_choice = "auto";
  std::string tool_choice_function;
  bool tool_choice_given = false;
  bool strict_tools = false;  // some tool asks for strict arguments
  bool parallel_tool_calls = true;  // false: an answer's first call alone
};

// Parses a request body. On error, `error` is filled and nullopt returned.
std::optional<CompletionRequest> ParseCompletionRequest(absl::string_view body, ApiError* error);
std::optional<ChatRequest> ParseChatRequest(absl::string_view body, ApiError* error);

}  // namespace dslaunch::runtime

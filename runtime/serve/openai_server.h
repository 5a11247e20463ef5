// dsserve's HTTP face: OpenAI's /v1/completions, /v1/chat/completions and
// /v1/models, /health and /metrics, over cpp-httplib (Debian's
// libcpp-httplib-dev), in front of the serving loop (serving_loop.h).
//
// Note [OpenAI-compatible serving]
//  - Requests are read strictly (Note [What an OpenAI request may say]); a
//    bad one gets 400 with OpenAI's error body naming the field ("param").
//    A prompt longer than the server runs (the model's context, or the whole
//    key/value cache) is a 400 naming prompt, messages or max_tokens.
//  - "model" may be left out; a name other than the served one is a 404
//    (code model_not_found), as OpenAI answers.
//  - With an API key, every /v1/ route needs "Authorization: Bearer <key>"
//    (401, code invalid_api_key, otherwise; compared in constant time).
//    /health and /metrics stay open, as vLLM's do: bind the server where
//    only trusted clients reach them.
//  - A full server (Note [The serving loop]) answers 429, a broken or
//    stopping one 503: a client can tell "retry later" from "bad request".
//  - stream: true answers with server-sent events, "data: <chunk>\n\n" per
//    piece of text and "data: [DONE]\n\n" at the end. A client that goes
//    away is noticed at the next write and its request cancelled: its
//    blocks go back to the pool. A non-streaming request has nothing to
//    write until it ends: its handler watches the connection instead (Note
//    [A non-streaming client that goes away], client_connection.h).
//  - Each connection is served by a thread of a pool of --max_connections:
//    a streaming response holds its thread until it ends.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/data/instruction_format.h"
#include "runtime/serve/folder_chat_template.h"
#include "runtime/serve/serving_loop.h"
#include "runtime/serve/serving_metrics.h"
#include "runtime/serve/tool_call_parser.h"
#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {

struct OpenAiServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: a free port
  std::string model_name;
  std::string api_key;  // empty: no authentication
  // Chats: the job file's form, or Jinja (the folder's or a .jinja file);
  // neither: /v1/chat/completions answers 400.
  std::optional<ChatTemplate> chat_template;
  std::optional<JinjaChatTemplate> jinja_chat_template;
  // Tokens generation also stops at, beside the tokenizer's eos
  // (generation_config.json's eos_token_id).
  std::vector<int64_t> stop_tokens;
  // Note [Tool calls]: how a chat answer's tool calls are read; none: a
  // request with tools (and tool_choice auto) answers 400.
  std::optional<ToolCallFormat> tool_call_parser;
  int64_t default_max_tokens = 16;            // /v1/completions without max_tokens (OpenAI's default)
  int max_connections = 256;
  size_t max_body_bytes = 4 << 20;
};

class OpenAiServer {
 public:
  // Binds the address (errors name --listen). `loop`, `tokenizer` and
  // `metrics` must outlive the server.
  static absl::StatusOr<std::unique_ptr<OpenAiServer>> Bind(const OpenAiServerOptions& options, ServingLoop& loop,
                                                            const Tokenizer& tokenizer, ServingMetrics& metrics);
  ~OpenAiServer();

  int port() const;
  // Serves until Stop(); returns when every connection's thread is done.
  void Serve();
  // Thread-safe; callable from a signal-handling thread.
  void Stop();

 private:
  class Impl;
  explicit OpenAiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dslaunch::runtime

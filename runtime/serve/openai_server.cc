#include "runtime/serve/openai_server.h"

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include <httplib.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/auth_token.h"
#include "common/json_quote.h"
#include "runtime/serve/chat_prompt.h"
#include "runtime/serve/openai_request.h"
#include "runtime/serve/openai_response.h"
#include "runtime/serve/text_streamer.h"

namespace dslaunch::runtime {
namespace {

constexpr char kJson[] = "application/json";
constexpr absl::Duration kWaitSlice = absl::Seconds(1);

const char* RejectionReason(int http_status) {
  switch (http_status) {
    case 401:
      return "unauthorized";
    case 404:
      return "not_found";
    case 429:
      return "queue_full";
    case 503:
      return "unavailable";
    default:
      return "bad_request";
  }
}

std::string RandomId(const char* prefix) {
  static thread_local std::mt19937_64 engine{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id.push_back(kHex[engine() % 16]);
  return id;
}

bool IsStopToken(const GenerationRequest& request, int64_t token) {
  return std::find(request.stop_tokens.begin(), request.stop_tokens.end(), token) != request.stop_tokens.end();
}

// A request ready for the loop.
struct Prepared {
  GenerationRequest request;
  std::vector<std::string> stop_strings;
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
};

// One request's text as tokens arrive: its streamer and what it counted.
struct Progress {
  Progress(const Tokenizer& tokenizer, const Prepared& prepared)
      : streamer(tokenizer, prepared.stop_strings), request(prepared.request) {}
  TextStreamer streamer;
  GenerationRequest request;
  int64_t generated = 0;
  FinishReason finished = FinishReason::kNone;
  absl::Status error;

  // Takes an update; returns the text it released. Sets `finished` at the
  // end (kStop at a stop string too, after which the caller cancels).
  std::string Take(const StreamUpdate& update) {
    std::string text;
    for (int64_t token : update.tokens) {
      ++generated;
      if (IsStopToken(request, token)) continue;  // ends the request, not text
      text += streamer.Add(token);
      if (streamer.stopped()) {
        finished = FinishReason::kStop;
        return text;
      }
    }
    if (!update.error.ok()) {
      error = update.error;
      return text;
    }
    if (update.finished != FinishReason::kNone) {
      text += streamer.Finish();
      finished = update.finished;
    }
    return text;
  }
  bool ended() const { return finished != FinishReason::kNone || !error.ok(); }
  TokenUsage usage() const { return {static_cast<int64_t>(request.prompt.size()), generated}; }
};

}  // namespace

class OpenAiServer::Impl {
 public:
  Impl(const OpenAiServerOptions& options, ServingLoop& loop, const Tokenizer& tokenizer, ServingMetrics& metrics)
      : options_(options), loop_(loop), tokenizer_(tokenizer), metrics_(metrics), started_(absl::ToUnixSeconds(absl::Now())) {}

  absl::Status Bind() {
    const int threads = options_.max_connections;
    server_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    server_.set_payload_max_length(options_.max_body_bytes);
    // cpp-httplib's default also sets SO_REUSEPORT, with which a second
    // server binds the same port and the two share its connections: an
    // address in use must be an error instead.
    server_.set_socket_options([](int socket) {
      int yes = 1;
      setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      return Authenticate(req, res);
    });
    server_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      ApiError error;
      error.http_status = res.status;
      if (res.status == 404) {
        error.message = absl::StrCat("no route ", req.method, " ", req.path,
                                     ": this server answers POST /v1/completions, POST /v1/chat/completions, GET "
                                     "/v1/models, GET /health and GET /metrics");
      } else if (res.status == 413) {
        error.message = absl::StrCat("the request body is larger than ", options_.max_body_bytes, " bytes");
      } else {
        error.message = absl::StrCat("HTTP ", res.status);
      }
      Reply(res, error);
    });
    server_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const absl::Status health = loop_.health();
      if (health.ok()) {
        res.set_content("ok\n", "text/plain");
      } else {
        res.status = 503;
        res.set_content(absl::StrCat(health.message(), "\n"), "text/plain");
      }
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.Text(), "text/plain; version=0.0.4");
    });
    server_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(absl::StrCat("{\"object\":\"list\",\"data\":[{\"id\":", JsonQuote(options_.model_name),
                                   ",\"object\":\"model\",\"created\":", started_, ",\"owned_by\":\"dslaunch\"}]}"),
                      kJson);
    });
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(req, res, /*chat=*/false);
    });
    server_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(req, res, /*chat=*/true);
    });
    if (options_.port == 0) {
      port_ = server_.bind_to_any_port(options_.host);
      if (port_ < 0) return absl::UnavailableError(absl::StrCat("--listen: cannot bind ", options_.host, ":0"));
    } else {
      if (!server_.bind_to_port(options_.host, options_.port)) {
        return absl::UnavailableError(absl::StrCat("--listen: cannot bind ", options_.host, ":", options_.port,
                                                   " (in use, or not an address of this host)"));
      }
      port_ = options_.port;
    }
    return absl::OkStatus();
  }

  int port() const { return port_; }
  void Serve() { server_.listen_after_bind(); }
  void Stop() { server_.stop(); }

 private:
  httplib::Server::HandlerResponse Authenticate(const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || !absl::StartsWith(req.path, "/v1/")) return httplib::Server::HandlerResponse::Unhandled;
    const std::string given = req.get_header_value("Authorization");
    if (TokensEqual(given, absl::StrCat("Bearer ", options_.api_key))) return httplib::Server::HandlerResponse::Unhandled;
    ApiError error;
    error.http_status = 401;
    error.code = "invalid_api_key";
    error.message = given.empty() ? "no API key: send the header 'Authorization: Bearer <key>'"
                                  : "the API key is not this server's";
    Reply(res, error);
    return httplib::Server::HandlerResponse::Handled;
  }

  void Reply(httplib::Response& res, const ApiError& error) {
    metrics_.Rejected(RejectionReason(error.http_status));
    res.status = error.http_status;
    res.set_content(ErrorJson(error), kJson);
  }

  // The positions one request may use: prompt plus max_tokens.
  int64_t PositionLimit() const {
    const GenerationEngine& engine = loop_.engine();
    return engine.runs_past_context() ? engine.cache_positions()
                                      : std::min(engine.context_length(), engine.cache_positions());
  }

  std::string LimitWhy() const {
    const GenerationEngine& engine = loop_.engine();
    return absl::StrCat("this server runs ", PositionLimit(), " positions per request (the model's context ",
                        engine.context_length(), ", the key/value cache ", engine.cache_positions(), ")");
  }

  bool Prepare(const httplib::Request& req, bool chat, Prepared* out, ApiError* error) {
    GenerationParameters parameters;
    std::string model;
    const char* prompt_field = chat ? "messages" : "prompt";
    if (chat) {
      std::optional<ChatRequest> parsed = ParseChatRequest(req.body, error);
      if (!parsed) return false;
      if (!options_.chat_template) {
        *error = ApiError{400, "invalid_request_error", "messages",
                          "this server has no chat template: start dsserve with --chat_template FILE, or use "
                          "/v1/completions", ""};
        return false;
      }
      auto prompt = BuildChatPrompt(tokenizer_, *options_.chat_template, parsed->messages);
      if (!prompt.ok()) {
        *error = ApiError{400, "invalid_request_error", "messages", std::string(prompt.status().message()), ""};
        return false;
      }
      out->request.prompt = std::move(prompt->tokens);
      out->request.stop_tokens = std::move(prompt->stop_tokens);
      out->stop_strings = std::move(prompt->stop_strings);
      parameters = std::move(parsed->parameters);
      model = std::move(parsed->model);
    } else {
      std::optional<CompletionRequest> parsed = ParseCompletionRequest(req.body, error);
      if (!parsed) return false;
      if (parsed->prompt_text) {
        if (tokenizer_.adds_bos() && tokenizer_.bos_id() >= 0) out->request.prompt.push_back(tokenizer_.bos_id());
        for (int32_t id : tokenizer_.Encode(*parsed->prompt_text)) out->request.prompt.push_back(id);
      } else {
        out->request.prompt = std::move(parsed->prompt_ids);
      }
      if (tokenizer_.eos_id() >= 0) out->request.stop_tokens.push_back(tokenizer_.eos_id());
      parameters = std::move(parsed->parameters);
      model = std::move(parsed->model);
    }
    if (!model.empty() && model != options_.model_name) {
      *error = ApiError{404, "invalid_request_error", "model",
                        absl::StrCat("the model '", model, "' does not exist: this server serves '",
                                     options_.model_name, "'"),
                        "model_not_found"};
      return false;
    }
    if (out->request.prompt.empty()) {
      *error = ApiError{400, "invalid_request_error", prompt_field, absl::StrCat(prompt_field, ": the prompt is empty"), ""};
      return false;
    }
    const int64_t prompt_tokens = static_cast<int64_t>(out->request.prompt.size());
    const int64_t limit = PositionLimit();
    if (prompt_tokens >= limit) {
      *error = ApiError{400, "invalid_request_error", prompt_field,
                        absl::StrCat(prompt_field, ": the prompt is ", prompt_tokens, " tokens; ", LimitWhy(),
                                     ", and at least one must be left to generate"),
                        "context_length_exceeded"};
      return false;
    }
    const int64_t max_tokens = parameters.max_tokens.value_or(chat ? limit - prompt_tokens : options_.default_max_tokens);
    if (prompt_tokens + max_tokens > limit) {
      *error = ApiError{400, "invalid_request_error", "max_tokens",
                        absl::StrCat("max_tokens: the prompt (", prompt_tokens, " tokens) + max_tokens (", max_tokens,
                                     ") is more than ", LimitWhy()),
                        "context_length_exceeded"};
      return false;
    }
    out->request.max_new_tokens = max_tokens;
    if (parameters.ignore_eos) {
      std::erase(out->request.stop_tokens, static_cast<int64_t>(tokenizer_.eos_id()));
    }
    SamplingOptions& sampling = out->request.sampling;
    sampling.greedy = parameters.temperature <= 0;
    sampling.temperature = parameters.temperature > 0 ? parameters.temperature : 1.0;
    sampling.top_p = parameters.top_p;
    sampling.top_k = parameters.top_k;
    sampling.repetition_penalty = parameters.repetition_penalty;
    sampling.seed = parameters.seed ? *parameters.seed : std::random_device{}();
    out->stop_strings.insert(out->stop_strings.end(), parameters.stop.begin(), parameters.stop.end());
    out->chat = chat;
    out->stream = parameters.stream;
    out->include_usage = parameters.include_usage;
    return true;
  }

  void Generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    ApiError error;
    auto prepared = std::make_shared<Prepared>();
    if (!Prepare(req, chat, prepared.get(), &error)) return Reply(res, error);
    auto submitted = loop_.Submit(prepared->request);
    if (!submitted.ok()) {
      const absl::Status& s = submitted.status();
      error.message = std::string(s.message());
      if (absl::IsResourceExhausted(s)) {
        error = ApiError{429, "rate_limit_error", "", error.message, "server_full"};
      } else if (absl::IsUnavailable(s)) {
        error = ApiError{503, "server_error", "", error.message, ""};
      } else {
        error = ApiError{400, "invalid_request_error", chat ? "messages" : "prompt", error.message, ""};
        if (absl::StartsWith(error.message, "max_new_tokens")) error.param = "max_tokens";
      }
      return Reply(res, error);
    }
    std::shared_ptr<RequestStream> stream = *submitted;
    ResponseHeader header{RandomId(chat ? "chatcmpl-" : "cmpl-"), absl::ToUnixSeconds(absl::Now()), options_.model_name};
    if (!prepared->stream) return Complete(res, *prepared, *stream, header);

    struct Streaming {
      Streaming(const Tokenizer& tokenizer, const Prepared& prepared) : progress(tokenizer, prepared) {}
      Progress progress;
      bool role_sent = false;
      bool done = false;
    };
    auto state = std::make_shared<Streaming>(tokenizer_, *prepared);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [state, stream, header, prepared](size_t, httplib::DataSink& sink) {
          std::string out;
          if (prepared->chat && !state->role_sent) {
            out += ServerSentEvent(ChatChunkJson(header, "assistant", "", ""));
            state->role_sent = true;
          }
          Progress& progress = state->progress;
          const std::string text = progress.Take(stream->Wait(absl::Now() + kWaitSlice));
          if (!text.empty()) {
            out += ServerSentEvent(prepared->chat ? ChatChunkJson(header, std::nullopt, text, "")
                                                  : CompletionChunkJson(header, text, ""));
          }
          if (!progress.error.ok()) {
            ApiError error{503, "server_error", "", std::string(progress.error.message()), ""};
            out += ServerSentEvent(ErrorJson(error));
            out += kServerSentEventsDone;
          } else if (progress.finished != FinishReason::kNone) {
            if (progress.streamer.stopped()) stream->Cancel();  // a stop string: the engine need not go on
            const std::string reason = FinishReasonName(progress.finished);
            out += ServerSentEvent(prepared->chat ? ChatChunkJson(header, std::nullopt, std::nullopt, reason)
                                                  : CompletionChunkJson(header, "", reason));
            if (prepared->include_usage) {
              out += ServerSentEvent(UsageChunkJson(
                  header, prepared->chat ? "chat.completion.chunk" : "text_completion", progress.usage()));
            }
            out += kServerSentEventsDone;
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            stream->Cancel();  // the client went away
            state->done = true;
            return false;
          }
          if (progress.ended()) {
            state->done = true;
            sink.done();
          }
          return true;
        },
        [state, stream](bool) {
          if (!state->done || !state->progress.ended()) stream->Cancel();
        });
  }

  void Complete(httplib::Response& res, const Prepared& prepared, RequestStream& stream, const ResponseHeader& header) {
    Progress progress(tokenizer_, prepared);
    std::string text;
    while (!progress.ended()) text += progress.Take(stream.Wait(absl::Now() + kWaitSlice));
    if (!progress.error.ok()) {
      return Reply(res, ApiError{503, "server_error", "", std::string(progress.error.message()), ""});
    }
    if (progress.streamer.stopped()) stream.Cancel();
    const std::string reason = FinishReasonName(progress.finished);
    res.set_content(prepared.chat ? ChatCompletionJson(header, text, reason, progress.usage())
                                  : CompletionJson(header, text, reason, progress.usage()),
                    kJson);
  }

  const OpenAiServerOptions options_;
  ServingLoop& loop_;
  const Tokenizer& tokenizer_;
  ServingMetrics& metrics_;
  const int64_t started_;
  httplib::Server server_;
  int port_ = 0;
};

absl::StatusOr<std::unique_ptr<OpenAiServer>> OpenAiServer::Bind(const OpenAiServerOptions& options, ServingLoop& loop,
                                                                 const Tokenizer& tokenizer, ServingMetrics& metrics) {
  auto impl = std::make_unique<Impl>(options, loop, tokenizer, metrics);
  if (absl::Status bound = impl->Bind(); !bound.ok()) return bound;
  return std::unique_ptr<OpenAiServer>(new OpenAiServer(std::move(impl)));
}

OpenAiServer::OpenAiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OpenAiServer::~OpenAiServer() = default;
int OpenAiServer::port() const { return impl_->port(); }
void OpenAiServer::Serve() { impl_->Serve(); }
void OpenAiServer::Stop() { impl_->Stop(); }

}  // namespace dslaunch::runtime

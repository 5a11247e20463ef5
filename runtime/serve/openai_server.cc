#include "runtime/serve/openai_server.h"

#include <algorithm>
#include <deque>
#include <iostream>
#include <mutex>
#include <numeric>
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
#include "runtime/serve/client_connection.h"
#include "runtime/serve/openai_request.h"
#include "runtime/serve/openai_response.h"
#include "runtime/serve/text_streamer.h"
#include "runtime/serve/token_text.h"
#include "runtime/serve/tool_call_form.h"
#include "runtime/serve/tool_call_parser.h"

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

// Characters in UTF-8 text (OpenAI's text_offset counts characters): the
// bytes that do not continue a character.
int64_t Characters(const std::string& text) {
  return std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

// A request ready for the loop.
struct Prepared {
  // Prompt by prompt, per_prompt choices each (best_of, or n): choice c of
  // a prompt samples with seed + c.
  std::vector<GenerationRequest> choices;
  int64_t per_prompt = 1;
  int64_t n = 1;              // choices returned per prompt
  int64_t prompt_tokens = 0;  // all prompts'
  std::vector<std::string> stop_strings;
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  std::string constraint_field;   // the request field that gave the choices' output constraint
  std::vector<std::string> echo;  // per prompt: completions' echo, the prompt's text first in each choice ("": none)
  // Note [Tool calls]: chat with tools (tool_choice auto): how the answers'
  // calls are read, of which tools, and whether several are kept.
  std::optional<ToolCallFormat> tool_format;
  std::vector<std::string> tool_names;
  bool parallel_tool_calls = true;
  const std::string& EchoOf(size_t choice) const { return echo[choice / static_cast<size_t>(per_prompt)]; }
};

// One choice's text as its tokens arrive: its streamer, its tokens' texts
// for log-probabilities, and what it counted.
struct ChoiceProgress {
  // The text is what the tokens add after the prompt (DecodeAfter), and a
  // token's text is read in that context; a scored prompt's tokens are read
  // from its start.
  ChoiceProgress(const Tokenizer& tokenizer, const Prepared& prepared, size_t choice)
      : streamer(tokenizer, prepared.stop_strings, DecodingContext(prepared.choices[choice].prompt)),
        texts(tokenizer, prepared.choices[choice].prompt_logprobs ? std::vector<int64_t>{}
                                                                   : prepared.choices[choice].prompt),
        request(prepared.choices[choice]),
        logprobs(prepared.logprobs),
        echo_characters(Characters(prepared.EchoOf(choice))),
        text_offset(echo_characters) {}
  TextStreamer streamer;
  TokenTexts texts;
  const GenerationRequest& request;  // in the Prepared, which outlives this
  const bool logprobs;
  const int64_t echo_characters;
  int64_t generated = 0;
  double logprob_sum = 0;
  int64_t text_offset = 0;  // where the next token's text starts
  FinishReason finished = FinishReason::kNone;
  std::vector<TokenLogprobs> entries;  // log-probabilities not yet sent

  // Takes the choice's update; returns the text it released. Sets
  // `finished` at the end (kStop at a stop string too, after which the
  // caller cancels the choice).
  std::string Take(const ChoiceUpdate& update) {
    if (update.prompt_logprobs && logprobs) PromptEntries(*update.prompt_logprobs);
    std::string text;
    for (size_t i = 0; i < update.tokens.size() && finished == FinishReason::kNone; ++i) {
      const int64_t token = update.tokens[i];
      ++generated;
      logprob_sum += update.logprobs[i];
      // Every generated token has its entry (usage counts each), a stop
      // token too (its text is the decoder's, usually ""), as vLLM's.
      if (logprobs) Entry(token, update.logprobs[i], i < update.top_logprobs.size() ? &update.top_logprobs[i] : nullptr);
      if (IsStopToken(request, token)) continue;  // ends the request, not text
      text += streamer.Add(token);
      if (streamer.stopped()) finished = FinishReason::kStop;
    }
    if (finished == FinishReason::kNone && update.finished != FinishReason::kNone) {
      text += streamer.Finish();
      finished = update.finished;
    }
    return text;
  }
  // Mean log-probability per generated token (best_of's measure).
  double MeanLogprob() const { return generated == 0 ? 0 : logprob_sum / static_cast<double>(generated); }

 private:
  // Note [Prompt log-probabilities]: the echoed prompt's tokens first (the
  // first unscored), their offsets from the start of the echo.
  void PromptEntries(const PromptLogprobs& scored) {
    text_offset = 0;
    for (size_t p = 0; p < request.prompt.size(); ++p) {
      if (p == 0) {
        TokenLogprobs first;
        first.chosen.text = texts.Text(request.prompt[0]);
        first.scored = false;
        texts.Push(request.prompt[0]);
        text_offset += Characters(first.chosen.text);
        entries.push_back(std::move(first));
        continue;
      }
      Entry(request.prompt[p], scored.logprobs[p - 1], p - 1 < scored.top.size() ? &scored.top[p - 1] : nullptr);
    }
    text_offset = echo_characters;
  }

  void Entry(int64_t token, double logprob, const std::vector<TokenLogprob>* top) {
    TokenLogprobs entry;
    entry.chosen = TokenText{texts.Text(token), logprob};
    if (top != nullptr) {
      for (const TokenLogprob& alternative : *top) {
        entry.top.push_back(TokenText{texts.Text(alternative.id), alternative.logprob});
      }
    }
    entry.text_offset = text_offset;
    text_offset += Characters(entry.chosen.text);
    texts.Push(token);
    entries.push_back(std::move(entry));
  }
};

// A whole request's choices.
struct Progress {
  Progress(const Tokenizer& tokenizer, const Prepared& prepared) : prompt_tokens(prepared.prompt_tokens) {
    for (size_t c = 0; c < prepared.choices.size(); ++c) choices.emplace_back(tokenizer, prepared, c);
  }
  std::deque<ChoiceProgress> choices;  // a deque: ChoiceProgress is not movable
  int64_t prompt_tokens = 0;
  absl::Status error;

  // Takes an update; returns each choice's released text.
  std::vector<std::string> Take(const StreamUpdate& update) {
    std::vector<std::string> texts(choices.size());
    for (size_t c = 0; c < choices.size() && c < update.choices.size(); ++c) texts[c] = choices[c].Take(update.choices[c]);
    if (!update.error.ok()) error = update.error;
    return texts;
  }
  bool ended() const {
    if (!error.ok()) return true;
    for (const ChoiceProgress& choice : choices) {
      if (choice.finished == FinishReason::kNone) return false;
    }
    return true;
  }
  TokenUsage usage() const {
    int64_t generated = 0;
    for (const ChoiceProgress& choice : choices) generated += choice.generated;
    return {prompt_tokens, generated};
  }
};
// Note [Tool calls]: a finished chat answer's reading into its output: the
// content, the calls (the first alone without parallel tool calls) with
// fresh ids, and finish_reason "tool_calls" when it made any.
void PutCalls(const Prepared& prepared, ToolCallReading reading, ChoiceOutput* output) {
  output->text = std::move(reading.content);
  if (reading.calls.empty()) return;
  if (!prepared.parallel_tool_calls) reading.calls.resize(1);
  for (ParsedToolCall& call : reading.calls) {
    output->tool_calls.push_back(ToolCallOutput{RandomId("call_"), std::move(call.name), std::move(call.arguments)});
  }
  output->finish_reason = "tool_calls";
}

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
      if (RefuseUnboundedBody(req, res)) return httplib::Server::HandlerResponse::Handled;
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
  // Note [Bounded request bodies]: cpp-httplib holds a body to
  // max_body_bytes only when it comes with a Content-Length; a chunked body,
  // one read to the end of the connection, or a compressed one (inflated as
  // it is read) would grow without bound. So a body that could carry one
  // comes with a Content-Length, uncompressed, or is refused before a byte of
  // it is read (on every path, before the API key is checked), and the
  // connection is closed after the answer.
  bool RefuseUnboundedBody(const httplib::Request& req, httplib::Response& res) {
    if (req.method == "GET" || req.method == "HEAD" || req.method == "OPTIONS") return false;
    ApiError error;
    if (req.has_header("Transfer-Encoding")) {
      error.http_status = 411;
      error.message = absl::StrCat("a request body with Transfer-Encoding '", req.get_header_value("Transfer-Encoding"),
                                   "' is not read: send it whole, with a Content-Length");
    } else if (!req.has_header("Content-Length")) {
      error.http_status = 411;
      error.message = "a request without a Content-Length is not read: send the body with one";
    } else if (const std::string encoding = req.get_header_value("Content-Encoding");
               !encoding.empty() && !absl::EqualsIgnoreCase(encoding, "identity")) {
      error.http_status = 415;
      error.message = absl::StrCat("a request body with Content-Encoding '", encoding, "' is not read: send it "
                                   "uncompressed (at most ", options_.max_body_bytes, " bytes)");
    } else {
      return false;
    }
    res.set_header("Connection", "close");
    Reply(res, error);
    return true;
  }

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

  // A prompt's length against the server's limits; max_tokens from the
  // request or the endpoint's default. `field` names the prompt in errors.
  bool CheckLength(const GenerationParameters& parameters, bool chat, const std::string& field,
                   GenerationRequest* request, ApiError* error) {
    if (request->prompt.empty()) {
      *error = ApiError{400, "invalid_request_error", chat ? "messages" : "prompt",
                        absl::StrCat(field, ": the prompt is empty"), ""};
      return false;
    }
    const int64_t prompt_tokens = static_cast<int64_t>(request->prompt.size());
    const int64_t limit = PositionLimit();
    if (prompt_tokens >= limit) {
      *error = ApiError{400, "invalid_request_error", chat ? "messages" : "prompt",
                        absl::StrCat(field, ": the prompt is ", prompt_tokens, " tokens; ", LimitWhy(),
                                     ", and at least one must be left to generate"),
                        "context_length_exceeded"};
      return false;
    }
    const int64_t max_tokens = parameters.max_tokens.value_or(chat ? limit - prompt_tokens : options_.default_max_tokens);
    if (prompt_tokens + max_tokens > limit) {
      *error = ApiError{400, "invalid_request_error", "max_tokens",
                        absl::StrCat("max_tokens: the prompt (", field == "prompt" || chat ? "" : field + ", ",
                                     prompt_tokens, " tokens) + max_tokens (", max_tokens, ") is more than ",
                                     LimitWhy()),
                        "context_length_exceeded"};
      return false;
    }
    request->max_new_tokens = max_tokens;
    return true;
  }

  bool Prepare(const httplib::Request& req, bool chat, Prepared* out, ApiError* error) {
    std::vector<GenerationRequest> prompts;  // one per prompt
    GenerationParameters parameters;
    std::string model;
    std::vector<int64_t> stop_tokens;
    if (chat) {
      std::optional<ChatRequest> parsed = ParseChatRequest(req.body, error);
      if (!parsed) return false;
      if (!options_.chat_template && !options_.jinja_chat_template) {
        *error = ApiError{400, "invalid_request_error", "messages",
                          "this server has no chat template (the model folder has none): start dsserve with "
                          "--chat_template FILE, or use /v1/completions", ""};
        return false;
      }
      const bool calls_wanted = parsed->tools && parsed->tool_choice != "none";
      if (calls_wanted && parsed->parameters.constraint.kind != OutputConstraint::Kind::kNone) {
        const std::string& field = parsed->parameters.constraint_field;
        *error = ApiError{400, "invalid_request_error", field,
                          absl::StrCat(field,
                                       ": an answer held to a form cannot also call tools (a call is text of its own "
                                       "shape): leave one out, or give \"tool_choice\": \"none\""),
                          ""};
        return false;
      }
      if (parsed->tools && options_.chat_template) {
        *error = ApiError{400, "invalid_request_error", "tools",
                          "tools: this server's chat template is the job file's prefix and suffix form, which does not "
                          "show the model its tools: serve the model folder's Jinja template (no --chat_template, or "
                          "a .jinja file)", ""};
        return false;
      }
      if (calls_wanted && !options_.tool_call_parser) {
        *error = ApiError{400, "invalid_request_error", "tools",
                          "tools: this server reads no tool calls from the model's answers: start dsserve with "
                          "--tool_call_parser hermes or llama3_json (the form the model's chat template teaches it), "
                          "or give \"tool_choice\": \"none\"", ""};
        return false;
      }
      if (calls_wanted) {
        out->tool_format = options_.tool_call_parser;
        out->tool_names = parsed->tool_names;
        out->parallel_tool_calls = parsed->parallel_tool_calls;
      }
      const bool call_required = parsed->tool_choice == "required" || parsed->tool_choice == "function";
      if (calls_wanted && (call_required || parsed->strict_tools)) {
        // Note [Required tool calls]: the answer is held to a call's form,
        // or (auto, strict tools) each call in the text is.
        const std::vector<std::string> callable = parsed->tool_choice == "function"
                                                      ? std::vector<std::string>{parsed->tool_choice_function}
                                                      : parsed->tool_names;
        auto form = call_required ? ToolCallConstraint(*options_.tool_call_parser, *parsed->tools, callable)
                                  : ToolCallsInTextConstraint(*options_.tool_call_parser, *parsed->tools, callable);
        if (!form.ok()) {
          const std::string message(form.status().message());
          *error = ApiError{400, "invalid_request_error",
                            absl::StartsWith(message, "tool_choice") ? "tool_choice" : "tools", message, ""};
          return false;
        }
        parsed->parameters.constraint = *std::move(form);
        parsed->parameters.constraint_field = call_required ? "tool_choice" : "tools";
      }
      auto prompt = options_.chat_template
                        ? BuildChatPrompt(tokenizer_, *options_.chat_template, parsed->messages)
                        : BuildJinjaChatPrompt(tokenizer_, *options_.jinja_chat_template, parsed->messages,
                                               parsed->tools ? &*parsed->tools : nullptr);
      if (!prompt.ok()) {
        *error = ApiError{400, "invalid_request_error", "messages", std::string(prompt.status().message()), ""};
        return false;
      }
      prompts.emplace_back().prompt = std::move(prompt->tokens);
      stop_tokens = std::move(prompt->stop_tokens);
      out->stop_strings = std::move(prompt->stop_strings);
      out->echo.emplace_back();
      parameters = std::move(parsed->parameters);
      model = std::move(parsed->model);
    } else {
      std::optional<CompletionRequest> parsed = ParseCompletionRequest(req.body, error);
      if (!parsed) return false;
      for (CompletionPrompt& given : parsed->prompts) {
        GenerationRequest& request = prompts.emplace_back();
        std::string& echo = out->echo.emplace_back();
        if (given.text) {
          if (tokenizer_.adds_bos() && tokenizer_.bos_id() >= 0) request.prompt.push_back(tokenizer_.bos_id());
          for (int32_t id : tokenizer_.Encode(*given.text)) request.prompt.push_back(id);
          if (parsed->parameters.echo) echo = *given.text;
        } else {
          request.prompt = std::move(given.ids);
          if (parsed->parameters.echo) {
            echo = tokenizer_.Decode(std::vector<int32_t>(request.prompt.begin(), request.prompt.end()));
          }
        }
      }
      if (tokenizer_.eos_id() >= 0) stop_tokens.push_back(tokenizer_.eos_id());
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
    for (int64_t id : options_.stop_tokens) {
      if (std::find(stop_tokens.begin(), stop_tokens.end(), id) == stop_tokens.end()) stop_tokens.push_back(id);
    }
    if (parameters.ignore_eos) {  // every end-of-sequence token; a chat template's end of turn stays
      std::erase(stop_tokens, static_cast<int64_t>(tokenizer_.eos_id()));
      for (int64_t id : options_.stop_tokens) std::erase(stop_tokens, id);
    }
    SamplingOptions sampling;
    sampling.greedy = parameters.temperature <= 0;
    sampling.temperature = parameters.temperature > 0 ? parameters.temperature : 1.0;
    sampling.top_p = parameters.top_p;
    sampling.top_k = parameters.top_k;
    sampling.repetition_penalty = parameters.repetition_penalty;
    sampling.top_logprobs = parameters.logprobs ? parameters.top_logprobs : 0;
    const bool score_prompt = parameters.echo && parameters.logprobs;
    const uint64_t seed = parameters.seed ? *parameters.seed : std::random_device{}();
    out->per_prompt = std::max(parameters.n, parameters.best_of);
    // Refused before the prompts are copied for each choice.
    if (const int64_t choices = static_cast<int64_t>(prompts.size()) * out->per_prompt; choices > loop_.capacity()) {
      *error = ApiError{400, "invalid_request_error", parameters.best_of > parameters.n ? "best_of" : "n",
                        absl::StrCat(choices, " choices (", prompts.size(), " prompt(s) of ", out->per_prompt,
                                     ") are more than this server holds at once (", loop_.capacity(), ")"),
                        ""};
      return false;
    }
    for (size_t p = 0; p < prompts.size(); ++p) {
      GenerationRequest& request = prompts[p];
      const std::string field =
          chat ? "messages" : (prompts.size() == 1 ? std::string("prompt") : absl::StrCat("prompt[", p, "]"));
      if (!CheckLength(parameters, chat, field, &request, error)) return false;
      request.stop_tokens = stop_tokens;
      request.sampling = sampling;
      request.constraint = parameters.constraint;
      request.prompt_logprobs = score_prompt;
      out->prompt_tokens += static_cast<int64_t>(request.prompt.size());
      // Choice c of every prompt samples with seed + c: each prompt's
      // choices are what it gets alone.
      for (int64_t c = 0; c < out->per_prompt; ++c) {
        out->choices.push_back(request);
        out->choices.back().sampling.seed = seed + static_cast<uint64_t>(c);
      }
    }
    out->n = parameters.n;
    out->constraint_field = parameters.constraint_field;
    if (parameters.constraint.kind != OutputConstraint::Kind::kNone &&
        parameters.constraint.kind != OutputConstraint::Kind::kStructuralTag && !parameters.constraint.or_text) {
      // Note [Constrained output]: a stop string inside the object would cut
      // it; the answer ends when its form is whole, the template's stop
      // strings aside. A structural tag's answer, and a JSON value's or text
      // (Note [JSON or text]), is free text, which stop strings end as they
      // end any (one inside a structure cuts it, as max_tokens would).
      if (!parameters.stop.empty()) {
        *error = ApiError{400, "invalid_request_error", "stop",
                          "stop: an answer held to a form (response_format, guided_json, guided_choice) ends when "
                          "the form is "
                          "whole, and a stop string inside it would cut it: leave stop out",
                          ""};
        return false;
      }
      out->stop_strings.clear();
    }
    out->stop_strings.insert(out->stop_strings.end(), parameters.stop.begin(), parameters.stop.end());
    out->chat = chat;
    out->stream = parameters.stream;
    out->include_usage = parameters.include_usage;
    out->logprobs = parameters.logprobs;
    return true;
  }

  void Generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    // Note [A non-streaming client that goes away]: found first, before a
    // client that resets the connection at once can take it away.
    const std::optional<ClientConnection> client =
        ClientConnection::Find({req.local_addr, req.local_port, req.remote_addr, req.remote_port});
    ApiError error;
    auto prepared = std::make_shared<Prepared>();
    if (!Prepare(req, chat, prepared.get(), &error)) return Reply(res, error);
    auto submitted = loop_.Submit(prepared->choices);
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
        if (absl::StartsWith(error.message, "output constraint")) error.param = prepared->constraint_field;
        if (absl::StartsWith(error.message, "n:")) {
          error.param = prepared->n > 1 ? "n" : prepared->per_prompt > 1 ? "best_of" : "prompt";
        }
      }
      return Reply(res, error);
    }
    std::shared_ptr<RequestStream> stream = *submitted;
    ResponseHeader header{RandomId(chat ? "chatcmpl-" : "cmpl-"), absl::ToUnixSeconds(absl::Now()), options_.model_name};
    if (!prepared->stream) return Complete(client, res, *prepared, *stream, header);

    struct Streaming {
      Streaming(const Tokenizer& tokenizer, const Prepared& prepared)
          : progress(tokenizer, prepared), started(prepared.choices.size(), false), ended(prepared.choices.size(), false) {}
      Progress progress;
      std::vector<bool> started;  // its first chunk (chat: the role; completions: the echo) sent
      std::vector<bool> ended;    // its finish chunk sent
      // With tools (Note [Tool calls]): each choice's answer as it streams,
      // and the log-probabilities of text it holds back.
      std::vector<ToolCallStream> answers;
      std::vector<std::vector<TokenLogprobs>> held_entries = std::vector<std::vector<TokenLogprobs>>(started.size());
      bool done = false;
    };
    auto state = std::make_shared<Streaming>(tokenizer_, *prepared);
    if (prepared->tool_format) {
      for (size_t c = 0; c < prepared->choices.size(); ++c) {
        state->answers.emplace_back(*prepared->tool_format, prepared->tool_names);
      }
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [state, stream, header, prepared](size_t, httplib::DataSink& sink) {
          std::string out;
          Progress& progress = state->progress;
          const size_t choices = progress.choices.size();
          // Every choice streams, its index its place (best_of > n is refused with stream).
          auto chunk = [&](ChoiceOutput piece, std::optional<std::string> role, bool has_content) {
            if (!progress.choices[piece.index].logprobs) {
              piece.logprobs = std::nullopt;
            }
            out += ServerSentEvent(prepared->chat ? ChatChunkJson(header, piece, role, has_content)
                                                  : CompletionChunkJson(header, piece));
          };
          for (size_t c = 0; c < choices; ++c) {
            if (state->started[c]) continue;
            state->started[c] = true;
            if (prepared->chat) {
              chunk(ChoiceOutput{static_cast<int64_t>(c), "", "", std::nullopt}, "assistant", true);
            } else if (!prepared->EchoOf(c).empty()) {
              chunk(ChoiceOutput{static_cast<int64_t>(c), prepared->EchoOf(c), "", std::nullopt}, std::nullopt, true);
            }
          }
          const std::vector<std::string> texts = progress.Take(stream->Wait(absl::Now() + kWaitSlice));
          for (size_t c = 0; c < choices; ++c) {
            ChoiceProgress& choice = progress.choices[c];
            std::vector<TokenLogprobs> entries;
            entries.swap(choice.entries);
            const bool ending = progress.error.ok() && choice.finished != FinishReason::kNone && !state->ended[c];
            std::string text = texts[c];
            ChoiceOutput calls{static_cast<int64_t>(c), "", "", std::nullopt};
            if (prepared->tool_format) {
              // Content only up to where a call may begin; the rest when the answer ends.
              ToolCallStream& answer = state->answers[c];
              text = answer.Add(texts[c]);
              if (ending) {
                PutCalls(*prepared, answer.Finish(), &calls);
                text += calls.text;
              }
              // Log-probabilities go out with their text: held while any text is.
              std::vector<TokenLogprobs>& held = state->held_entries[c];
              held.insert(held.end(), std::make_move_iterator(entries.begin()), std::make_move_iterator(entries.end()));
              entries.clear();
              if (ending || answer.held() == 0) entries.swap(held);
            }
            if (!text.empty() || !entries.empty()) {
              chunk(ChoiceOutput{static_cast<int64_t>(c), text, "", std::move(entries)}, std::nullopt, true);
            }
            const bool made_calls = !calls.tool_calls.empty();
            if (made_calls) {
              calls.text.clear();
              calls.finish_reason.clear();
              chunk(std::move(calls), std::nullopt, false);
            }
            if (ending) {
              state->ended[c] = true;
              if (choice.streamer.stopped()) stream->CancelChoice(c);  // a stop string: the engine need not go on
              ChoiceOutput last{static_cast<int64_t>(c), "", FinishReasonName(choice.finished), std::nullopt};
              if (made_calls) last.finish_reason = "tool_calls";
              if (!prepared->chat && choice.logprobs) last.logprobs = std::vector<TokenLogprobs>{};
              chunk(std::move(last), std::nullopt, false);
            }
          }
          if (!progress.error.ok()) {
            ApiError error{503, "server_error", "", std::string(progress.error.message()), ""};
            out += ServerSentEvent(ErrorJson(error));
            out += kServerSentEventsDone;
          } else if (progress.ended()) {
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

  // Note [A non-streaming client that goes away].
  void Complete(const std::optional<ClientConnection>& client, httplib::Response& res, const Prepared& prepared,
                RequestStream& stream, const ResponseHeader& header) {
    if (!client) {
      // The socket is open while its handler runs: not finding it means
      // the client reset the connection at once, or the lookup does not
      // work here.
      static std::once_flag warned;
      std::call_once(warned, [] {
        std::cerr << "dsserve: warning: a non-streaming request's connection was not found in /proc/self/fd (its "
                  << "client reset it, or the lookup does not work here); such a request runs to its end\n";
      });
    }
    Progress progress(tokenizer_, prepared);
    std::vector<std::string> texts(prepared.choices.size());
    std::vector<bool> cancelled(prepared.choices.size(), false);
    while (!progress.ended()) {
      if (client && client->PeerClosed()) {
        stream.Cancel();  // nobody is waiting for the answer: its blocks go back to the pool
        // What httplib tries to write: nginx's "client closed request"
        // (with a body, so that the error handler does not count it as a
        // rejected request: the loop counts it cancelled).
        res.status = 499;
        res.set_header("Connection", "close");
        res.set_content(ErrorJson(ApiError{499, "client_closed_request", "", "the client closed the connection", ""}),
                        kJson);
        return;
      }
      const std::vector<std::string> pieces = progress.Take(stream.Wait(absl::Now() + kWaitSlice));
      for (size_t c = 0; c < pieces.size(); ++c) {
        texts[c] += pieces[c];
        if (progress.choices[c].streamer.stopped() && !cancelled[c]) {
          stream.CancelChoice(c);  // a stop string ended the choice: the engine need not go on
          cancelled[c] = true;
        }
      }
    }
    if (!progress.error.ok()) {
      return Reply(res, ApiError{503, "server_error", "", std::string(progress.error.message()), ""});
    }
    // Prompt by prompt; best_of: the n choices of highest mean
    // log-probability per token, best first.
    std::vector<ChoiceOutput> choices;
    const size_t per_prompt = static_cast<size_t>(prepared.per_prompt);
    for (size_t first = 0; first < prepared.choices.size(); first += per_prompt) {
      std::vector<size_t> order(per_prompt);
      std::iota(order.begin(), order.end(), first);
      if (per_prompt > static_cast<size_t>(prepared.n)) {
        std::stable_sort(order.begin(), order.end(), [&progress](size_t a, size_t b) {
          return progress.choices[a].MeanLogprob() > progress.choices[b].MeanLogprob();
        });
        order.resize(static_cast<size_t>(prepared.n));
      }
      for (size_t c : order) {
        ChoiceProgress& choice = progress.choices[c];
        ChoiceOutput output{static_cast<int64_t>(choices.size()), prepared.EchoOf(c) + texts[c],
                            FinishReasonName(choice.finished), std::nullopt};
        if (prepared.logprobs) output.logprobs = std::move(choice.entries);
        if (prepared.tool_format) {
          PutCalls(prepared, ReadToolCalls(*prepared.tool_format, texts[c], prepared.tool_names), &output);
        }
        choices.push_back(std::move(output));
      }
    }
    res.set_content(prepared.chat ? ChatCompletionJson(header, choices, progress.usage())
                                  : CompletionJson(header, choices, progress.usage()),
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

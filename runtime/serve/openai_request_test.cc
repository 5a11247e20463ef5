// Note [What an OpenAI request may say]: the fields read, their ranges, the
// neutral-only ones, and errors that name the field.
#include "runtime/serve/openai_request.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/serve/openai_response.h"
#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ApiError CompletionError(const std::string& body) {
  ApiError error;
  EXPECT_FALSE(ParseCompletionRequest(body, &error).has_value()) << body;
  return error;
}

ApiError ChatError(const std::string& body) {
  ApiError error;
  EXPECT_FALSE(ParseChatRequest(body, &error).has_value()) << body;
  return error;
}

TEST(OpenAiRequestTest, ACompletionRequestIsReadWhole) {
  ApiError error;
  auto request = ParseCompletionRequest(
      R"({"model": "tiny", "prompt": "Once upon", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
          "repetition_penalty": 1.1, "seed": 42, "stop": ["\n", "END"], "stream": true,
          "stream_options": {"include_usage": true}, "n": 1, "echo": false, "logprobs": null,
          "frequency_penalty": 0, "presence_penalty": 0.0, "logit_bias": {}, "user": "alice", "ignore_eos": true})",
      &error);
  ASSERT_TRUE(request.has_value()) << error.message;
  EXPECT_EQ(request->model, "tiny");
  EXPECT_EQ(*request->prompt_text, "Once upon");
  const GenerationParameters& p = request->parameters;
  EXPECT_EQ(*p.max_tokens, 7);
  EXPECT_DOUBLE_EQ(p.temperature, 0.5);
  EXPECT_DOUBLE_EQ(p.top_p, 0.9);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_DOUBLE_EQ(p.repetition_penalty, 1.1);
  EXPECT_EQ(*p.seed, 42u);
  EXPECT_THAT(p.stop, ElementsAre("\n", "END"));
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_TRUE(p.ignore_eos);
}

TEST(OpenAiRequestTest, PromptsComeAsTextOrTokenIds) {
  ApiError error;
  EXPECT_EQ(*ParseCompletionRequest(R"({"prompt": ["one"]})", &error)->prompt_text, "one");
  EXPECT_THAT(ParseCompletionRequest(R"({"prompt": [5, 6, 7]})", &error)->prompt_ids, ElementsAre(5, 6, 7));
  EXPECT_THAT(ParseCompletionRequest(R"({"prompt": [[5, 6]]})", &error)->prompt_ids, ElementsAre(5, 6));
  auto defaults = ParseCompletionRequest(R"({"prompt": "x"})", &error);
  EXPECT_FALSE(defaults->parameters.max_tokens.has_value());
  EXPECT_FALSE(defaults->parameters.seed.has_value());
  EXPECT_DOUBLE_EQ(defaults->parameters.temperature, 1.0);
  EXPECT_EQ(ParseCompletionRequest(R"({"prompt": "x", "top_k": -1})", &error)->parameters.top_k, 0);
  EXPECT_THAT(ParseCompletionRequest(R"({"prompt": "x", "stop": "##"})", &error)->parameters.stop, ElementsAre("##"));
}

TEST(OpenAiRequestTest, BadCompletionRequestsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
    const char* message;
  };
  for (const Case& c : {
           Case{R"({"prompt": "x", "max_tokens": 0})", "max_tokens", "max_tokens: 0 is not in [1, "},
           Case{R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens", "max_tokens: expected an integer, got 2.5"},
           Case{R"({"prompt": "x", "max_tokens": "9"})", "max_tokens", "expected an integer, got a string"},
           Case{R"({"prompt": "x", "temperature": 3})", "temperature", "temperature: 3 is not in [0, 2]"},
           Case{R"({"prompt": "x", "top_p": 0})", "top_p", "top_p: must be > 0"},
           Case{R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop", "stop: at most 4 strings (got 5)"},
           Case{R"({"prompt": "x", "stop": [""]})", "stop", "stop[0]: an empty string"},
           Case{R"({"prompt": "x", "stop": [1]})", "stop", "stop[0]: expected a string, got a number"},
           Case{R"({"prompt": "x", "stream": "yes"})", "stream", "stream: expected true or false, got a string"},
           Case{R"({"prompt": "x", "n": 2})", "n", "n: this server returns one choice per request"},
           Case{R"({"prompt": "x", "echo": true})", "echo", "does not echo the prompt"},
           Case{R"({"prompt": "x", "logprobs": 5})", "logprobs", "does not return log-probabilities"},
           Case{R"({"prompt": "x", "presence_penalty": 0.5})", "presence_penalty", "repetition_penalty is supported"},
           Case{R"({"prompt": "x", "logit_bias": {"5": 10}})", "logit_bias", "does not apply a logit bias"},
           Case{R"({"prompt": "x", "suffix": "end"})", "suffix", "does not insert text"},
           Case{R"({"prompt": "x", "stream_options": {"chunk": 1}})", "stream_options", "unknown field 'chunk'"},
           Case{R"({"prompt": "x", "temprature": 1})", "temprature", "unknown field 'temprature'"},
           Case{R"({"prompt": ["a", "b"]})", "prompt", "one prompt per request is supported (got 2)"},
           Case{R"({"prompt": []})", "prompt", "got an empty array"},
           Case{R"({"prompt": [1, -2]})", "prompt", "prompt[1]: -2 is not in [0, "},
           Case{R"({"prompt": 5})", "prompt", "got a number"},
           Case{R"({"max_tokens": 5})", "prompt", "prompt: missing"},
           Case{R"({"messages": []})", "messages", "messages go to /v1/chat/completions"},
       }) {
    const ApiError error = CompletionError(c.body);
    EXPECT_EQ(error.http_status, 400) << c.body;
    EXPECT_EQ(error.type, "invalid_request_error");
    EXPECT_EQ(error.param, c.param) << c.body;
    EXPECT_THAT(error.message, HasSubstr(c.message)) << c.body;
  }
  ApiError syntax = CompletionError(R"({"prompt": "x",})");
  EXPECT_EQ(syntax.http_status, 400);
  EXPECT_THAT(syntax.message, HasSubstr("the request body:1:"));
  EXPECT_THAT(CompletionError(R"(["prompt"])").message, HasSubstr("must be a JSON object, got an array"));
  EXPECT_THAT(CompletionError(R"({"prompt": "x", "prompt": "y"})").message, HasSubstr("duplicate"));
}

TEST(OpenAiRequestTest, ChatMessagesAreReadAndCheckedByIndex) {
  ApiError error;
  auto request = ParseChatRequest(
      R"({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}],
                        "name": "bob"}],
          "max_completion_tokens": 9})",
      &error);
  ASSERT_TRUE(request.has_value()) << error.message;
  ASSERT_EQ(request->messages.size(), 2u);
  EXPECT_EQ(request->messages[0].role, "system");
  EXPECT_EQ(request->messages[1].content, "Hi there");
  EXPECT_EQ(*request->parameters.max_tokens, 9);

  EXPECT_THAT(ChatError(R"({"messages": [{"role": "tool", "content": "x"}]})").message,
              HasSubstr("messages[0].role: 'tool' is not one of system, user, assistant"));
  EXPECT_THAT(ChatError(R"({"messages": [{"role": "user"}]})").message, HasSubstr("messages[0]: no content"));
  EXPECT_THAT(ChatError(R"({"messages": [{"content": "x"}]})").message, HasSubstr("messages[0]: no role"));
  EXPECT_THAT(ChatError(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})").message,
              HasSubstr("messages[0].content[0]: only {\"type\": \"text\""));
  EXPECT_THAT(ChatError(R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})").message,
              HasSubstr("messages[0]: unknown field 'tool_calls'"));
  EXPECT_THAT(ChatError(R"({"messages": "hello"})").message, HasSubstr("expected a non-empty array of messages"));
  EXPECT_THAT(ChatError(R"({"model": "m"})").message, HasSubstr("messages: missing"));
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})").param, "tools");
}

// The response bodies parse as JSON with OpenAI's fields.
TEST(OpenAiResponseTest, BodiesAreJsonInOpenAisShapes) {
  ResponseHeader header{"cmpl-1", 1700000000, "tiny"};
  auto completion = ParseJson(CompletionJson(header, "a \"quoted\"\nline", "length", {3, 4}), "completion");
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_EQ(completion->Find("object")->string_value(), "text_completion");
  const JsonValue& choice = completion->Find("choices")->items()[0];
  EXPECT_EQ(choice.Find("text")->string_value(), "a \"quoted\"\nline");
  EXPECT_EQ(choice.Find("finish_reason")->string_value(), "length");
  EXPECT_EQ(completion->Find("usage")->Find("total_tokens")->number_value(), 7);

  auto chat = ParseJson(ChatCompletionJson(header, "hi", "stop", {1, 1}), "chat");
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->Find("object")->string_value(), "chat.completion");
  EXPECT_EQ(chat->Find("choices")->items()[0].Find("message")->Find("role")->string_value(), "assistant");

  auto first = ParseJson(ChatChunkJson(header, "assistant", "", ""), "chunk");
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->Find("choices")->items()[0].Find("finish_reason")->is_null());
  EXPECT_EQ(first->Find("choices")->items()[0].Find("delta")->Find("role")->string_value(), "assistant");
  auto last = ParseJson(ChatChunkJson(header, std::nullopt, std::nullopt, "stop"), "chunk");
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->Find("choices")->items()[0].Find("delta")->keys().empty());

  auto usage = ParseJson(UsageChunkJson(header, "text_completion", {2, 5}), "usage");
  ASSERT_TRUE(usage.ok());
  EXPECT_TRUE(usage->Find("choices")->items().empty());

  auto error = ParseJson(ErrorJson(ApiError{400, "invalid_request_error", "max_tokens", "bad", ""}), "error");
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(error->Find("error")->Find("param")->string_value(), "max_tokens");
  EXPECT_TRUE(error->Find("error")->Find("code")->is_null());
  EXPECT_EQ(ServerSentEvent("{}"), "data: {}\n\n");
}

}  // namespace
}  // namespace dslaunch::runtime

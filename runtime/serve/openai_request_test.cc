// Note [What an OpenAI request may say]: the fields read, their ranges, the
// neutral-only ones, and errors that name the field.
#include "runtime/serve/openai_request.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

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
  ASSERT_EQ(request->prompts.size(), 1u);
  EXPECT_EQ(*request->prompts[0].text, "Once upon");
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
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.best_of, 0);
  EXPECT_FALSE(p.echo);
  EXPECT_FALSE(p.logprobs);
}

TEST(OpenAiRequestTest, ChoicesAndLogprobsAreReadAsEachEndpointSpellsThem) {
  ApiError error;
  auto completion = ParseCompletionRequest(R"({"prompt": "x", "n": 2, "best_of": 5, "logprobs": 3})", &error);
  ASSERT_TRUE(completion.has_value()) << error.message;
  EXPECT_EQ(completion->parameters.n, 2);
  EXPECT_EQ(completion->parameters.best_of, 5);
  EXPECT_TRUE(completion->parameters.logprobs);
  EXPECT_EQ(completion->parameters.top_logprobs, 3);
  auto zero = ParseCompletionRequest(R"({"prompt": "x", "logprobs": 0, "echo": false})", &error);
  ASSERT_TRUE(zero.has_value()) << error.message;
  EXPECT_TRUE(zero->parameters.logprobs) << "logprobs 0: the chosen tokens' only";
  EXPECT_EQ(zero->parameters.top_logprobs, 0);
  auto echo = ParseCompletionRequest(R"({"prompt": "x", "echo": true, "n": 2, "best_of": 2, "stream": true})", &error);
  ASSERT_TRUE(echo.has_value()) << error.message;
  EXPECT_TRUE(echo->parameters.echo);

  auto chat = ParseChatRequest(
      R"({"messages": [{"role": "user", "content": "x"}], "n": 4, "logprobs": true, "top_logprobs": 20})", &error);
  ASSERT_TRUE(chat.has_value()) << error.message;
  EXPECT_EQ(chat->parameters.n, 4);
  EXPECT_TRUE(chat->parameters.logprobs);
  EXPECT_EQ(chat->parameters.top_logprobs, 20);
  const std::string messages = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(ChatError("{" + messages + R"(, "top_logprobs": 2})").message, "top_logprobs: needs \"logprobs\": true");
  EXPECT_THAT(ChatError("{" + messages + R"(, "logprobs": 2})").message, HasSubstr("logprobs: expected true or false"));
  EXPECT_EQ(ChatError("{" + messages + R"(, "top_logprobs": 21, "logprobs": true})").param, "top_logprobs");
  EXPECT_THAT(ChatError("{" + messages + R"(, "best_of": 2})").message, HasSubstr("best_of on /v1/completions only"));
  EXPECT_THAT(ChatError("{" + messages + R"(, "echo": true})").message, HasSubstr("on /v1/completions only"));
}

TEST(OpenAiRequestTest, PromptsComeAsTextOrTokenIds) {
  ApiError error;
  EXPECT_EQ(*ParseCompletionRequest(R"({"prompt": ["one"]})", &error)->prompts[0].text, "one");
  EXPECT_THAT(ParseCompletionRequest(R"({"prompt": [5, 6, 7]})", &error)->prompts[0].ids, ElementsAre(5, 6, 7));
  EXPECT_THAT(ParseCompletionRequest(R"({"prompt": [[5, 6]]})", &error)->prompts[0].ids, ElementsAre(5, 6));
  auto texts = ParseCompletionRequest(R"({"prompt": ["one", "two", ""]})", &error);
  ASSERT_EQ(texts->prompts.size(), 3u);
  EXPECT_EQ(*texts->prompts[1].text, "two");
  auto ids = ParseCompletionRequest(R"({"prompt": [[5, 6], [7]]})", &error);
  ASSERT_EQ(ids->prompts.size(), 2u);
  EXPECT_THAT(ids->prompts[1].ids, ElementsAre(7));
  EXPECT_FALSE(ids->prompts[1].text.has_value());
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
           Case{R"({"prompt": "x", "n": 0})", "n", "n: 0 is not in [1, 128]"},
           Case{R"({"prompt": "x", "n": 129})", "n", "n: 129 is not in [1, 128]"},
           Case{R"({"prompt": "x", "n": 3, "best_of": 2})", "best_of", "best_of: 2 is less than n (3)"},
           Case{R"({"prompt": "x", "best_of": 2, "stream": true})", "best_of", "cannot be streamed"},
           Case{R"({"prompt": "x", "echo": 1})", "echo", "echo: expected true or false"},
           Case{R"({"prompt": "x", "logprobs": 21})", "logprobs", "logprobs: 21 is not in [0, 20]"},
           Case{R"({"prompt": "x", "logprobs": true})", "logprobs", "logprobs: expected an integer"},
           Case{R"({"prompt": "x", "top_logprobs": 2})", "top_logprobs", "on /v1/completions logprobs is the number"},
           Case{R"({"prompt": "x", "presence_penalty": 0.5})", "presence_penalty", "repetition_penalty is supported"},
           Case{R"({"prompt": "x", "logit_bias": {"5": 10}})", "logit_bias", "does not apply a logit bias"},
           Case{R"({"prompt": "x", "suffix": "end"})", "suffix", "does not insert text"},
           Case{R"({"prompt": "x", "response_format": {"type": "json_schema"}})", "response_format",
                "expected a json_schema object with the schema in it"},
           Case{R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "a"}}})",
                "response_format", "response_format.json_schema: no schema"},
           Case{R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": {},
                "strict": "yes"}}})", "response_format", "json_schema.strict: expected true or false"},
           Case{R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": {},
                "schema_name": "a"}}})", "response_format", "unknown field 'schema_name'"},
           Case{R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema":
                {"type": "object", "properties": {"age": {"type": "array", "uniqueItems": true}}}}}})", "response_format",
                "response_format.json_schema: schema/properties/age: 'uniqueItems' is not supported"},
           Case{R"({"prompt": "x", "response_format": {"type": "json_object", "json_schema": {"schema": {}}}})",
                "response_format", "json_schema goes with type json_schema, not 'json_object'"},
           Case{R"({"prompt": "x", "response_format": {"type": "xml"}})", "response_format",
                "expected json_object, json_schema, structural_tag or text"},
           // Note [Structural tags]: vLLM's form, each part named.
           Case{R"({"prompt": "x", "response_format": {"type": "structural_tag", "triggers": ["<"]}})",
                "response_format", "a structural_tag needs its structures"},
           Case{R"({"prompt": "x", "response_format": {"type": "structural_tag", "structures": [
                {"begin": "<a>", "schema": {}, "end": "</a>"}]}})", "response_format", "needs its triggers"},
           Case{R"({"prompt": "x", "response_format": {"type": "structural_tag", "triggers": ["<"], "structures": [
                {"begin": "<a>", "end": "</a>"}]}})", "response_format", "response_format.structures[0]: no schema"},
           Case{R"({"prompt": "x", "response_format": {"type": "structural_tag", "triggers": ["<"], "structures": [
                {"begin": "<a>", "schema": {}, "end": "</a>", "start": 1}]}})", "response_format",
                "structures[0]: unknown field 'start' (begin, schema and end are read)"},
           Case{R"({"prompt": "x", "response_format": {"type": "structural_tag", "triggers": ["<"], "structures": [
                {"begin": "<a>", "schema": {"type": "strng"}, "end": "</a>"}]}})", "response_format",
                "response_format.structures[0].schema: schema/type"},
           Case{R"({"prompt": "x", "response_format": {"type": "structural_tag", "triggers": ["["], "structures": [
                {"begin": "<a>", "schema": {}, "end": "</a>"}]}})", "response_format",
                "response_format.triggers[0]: '[' begins no structure's begin"},
           Case{R"({"prompt": "x", "response_format": {"type": "structural_tag", "triggers": "<", "structures": []}})",
                "response_format", "response_format.triggers: expected an array, got a string"},
           Case{R"({"prompt": "x", "response_format": {"type": "structural_tag", "triggers": ["<"], "structures": [],
                "format": {}}})", "response_format", "unknown field 'format'"},
           Case{R"({"prompt": "x", "guided_json": {"type": "strng"}})", "guided_json", "guided_json: schema/type"},
           Case{R"({"prompt": "x", "guided_json": "{\"type\": "})", "guided_json", "guided_json:1:"},
           Case{R"({"prompt": "x", "guided_json": {}, "guided_choice": ["a"]})", "guided_choice",
                "guided_json and guided_choice both hold the answer to a form: give one"},
           Case{R"({"prompt": "x", "response_format": {"type": "json_object", "strict": true}})", "response_format",
                "unknown field 'strict'"},
           Case{R"({"prompt": "x", "response_format": "json"})", "response_format", "expected an object, got a string"},
           Case{R"({"prompt": "x", "guided_choice": []})", "guided_choice", "1 to 256 strings (got 0)"},
           Case{R"({"prompt": "x", "guided_choice": ["a", ""]})", "guided_choice", "guided_choice[1]: an empty string"},
           Case{R"({"prompt": "x", "guided_choice": ["a"], "response_format": {"type": "json_object"}})",
                "response_format", "guided_choice and response_format both hold the answer to a form: give one"},
           Case{R"({"prompt": "x", "stream_options": {"chunk": 1}})", "stream_options", "unknown field 'chunk'"},
           Case{R"({"prompt": "x", "temprature": 1})", "temprature", "unknown field 'temprature'"},
           Case{R"({"prompt": ["a", [1]]})", "prompt", "prompt[1]: expected a string, got an array"},
           Case{R"({"prompt": [[1], "a"]})", "prompt", "prompt[1]: expected an array of token ids (as prompt[0])"},
           Case{R"({"prompt": [[1], []]})", "prompt", "prompt[1]: no token ids"},
           Case{R"({"prompt": [[1], [2, -3]]})", "prompt", "prompt[1][1]: -3 is not in [0, "},
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
  // Stop strings are held to 1 KiB each (they are copied into every choice).
  const std::string long_stop(1025, 'z');
  EXPECT_THAT(CompletionError(absl::StrCat(R"({"prompt": "x", "stop": ")", long_stop, "\"}")).message,
              HasSubstr("stop: longer than 1024 bytes"));
  EXPECT_THAT(CompletionError(absl::StrCat(R"({"prompt": "x", "stop": ["a", ")", long_stop, "\"]}")).message,
              HasSubstr("stop[1]: longer than 1024 bytes"));
  ApiError error;
  EXPECT_TRUE(ParseCompletionRequest(absl::StrCat(R"({"prompt": "x", "stop": ")", std::string(1024, 'z'), "\"}"),
                                     &error))
      << error.message;
}

// Note [Constrained output]: OpenAI's json mode and vLLM's guided_choice.
TEST(OpenAiRequestTest, AResponseFormatOrGuidedChoiceConstrainsTheOutput) {
  ApiError error;
  auto json = ParseChatRequest(R"({"messages": [{"role": "user", "content": "hi"}],
                                   "response_format": {"type": "json_object"}})",
                               &error);
  ASSERT_TRUE(json) << error.message;
  EXPECT_EQ(json->parameters.constraint.kind, OutputConstraint::Kind::kJsonObject);
  auto choice = ParseCompletionRequest(R"({"prompt": "x", "guided_choice": ["yes", "no"]})", &error);
  ASSERT_TRUE(choice) << error.message;
  EXPECT_EQ(choice->parameters.constraint,
            (OutputConstraint::Choice(std::vector<std::string>{"yes", "no"})));
  EXPECT_EQ(choice->parameters.constraint_field, "guided_choice");
  // Note [JSON schemas for constrained output]: OpenAI's structured output
  // and vLLM's guided_json (a schema, or its text) carry the schema compact.
  auto schema = ParseChatRequest(R"({"messages": [{"role": "user", "content": "hi"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": true,
      "description": "d", "schema": {"type": "object", "properties": {"name": {"type": "string"}},
      "required": ["name"], "additionalProperties": false}}}})",
                                 &error);
  ASSERT_TRUE(schema) << error.message;
  EXPECT_EQ(schema->parameters.constraint.kind, OutputConstraint::Kind::kJsonSchema);
  EXPECT_EQ(schema->parameters.constraint.schema,
            R"({"type":"object","properties":{"name":{"type":"string"}},"required":["name"],)"
            R"("additionalProperties":false})");
  EXPECT_EQ(schema->parameters.constraint_field, "response_format");
  for (const char* body : {R"({"prompt": "x", "guided_json": {"enum": [1, 2]}})",
                           R"({"prompt": "x", "guided_json": "{\"enum\": [1, 2]}"})"}) {
    auto guided = ParseCompletionRequest(body, &error);
    ASSERT_TRUE(guided) << error.message;
    EXPECT_EQ(guided->parameters.constraint, (OutputConstraint::JsonSchema(R"({"enum":[1,2]})")));
    EXPECT_EQ(guided->parameters.constraint_field, "guided_json");
  }
  auto tag = ParseCompletionRequest(R"({"prompt": "x", "response_format": {"type": "structural_tag",
      "structures": [{"begin": "<f=a>", "schema": {"type": "object"}, "end": "</f>"},
                     {"begin": "<f=b>", "schema": {"enum": [1]}, "end": "</f>"}], "triggers": ["<f="]}})",
                                    &error);
  ASSERT_TRUE(tag) << error.message;
  EXPECT_EQ(tag->parameters.constraint,
            OutputConstraint::StructuralTag({{"<f=a>", R"({"type":"object"})", "</f>"}, {"<f=b>", R"({"enum":[1]})", "</f>"}},
                                            {"<f="}));
  EXPECT_EQ(tag->parameters.constraint_field, "response_format");
  auto text = ParseCompletionRequest(R"({"prompt": "x", "response_format": {"type": "text"}})", &error);
  ASSERT_TRUE(text) << error.message;
  EXPECT_EQ(text->parameters.constraint.kind, OutputConstraint::Kind::kNone);
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
  EXPECT_EQ(request->messages[1].name, "bob");
  EXPECT_EQ(*request->parameters.max_tokens, 9);

  EXPECT_THAT(ChatError(R"({"messages": [{"role": "robot", "content": "x"}]})").message,
              HasSubstr("messages[0].role: 'robot' is not one of system, user, assistant, tool"));
  EXPECT_THAT(ChatError(R"({"messages": [{"role": "user"}]})").message, HasSubstr("messages[0]: no content"));
  EXPECT_THAT(ChatError(R"({"messages": [{"content": "x"}]})").message, HasSubstr("messages[0]: no role"));
  EXPECT_THAT(ChatError(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})").message,
              HasSubstr("messages[0].content[0]: only {\"type\": \"text\""));
  EXPECT_THAT(ChatError(R"({"messages": [{"role": "user", "content": "x", "refusal": null}]})").message,
              HasSubstr("messages[0]: unknown field 'refusal'"));
  EXPECT_THAT(ChatError(R"({"messages": "hello"})").message, HasSubstr("expected a non-empty array of messages"));
  EXPECT_THAT(ChatError(R"({"model": "m"})").message, HasSubstr("messages: missing"));
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})").param, "tools");
}

// Note [Tool calls]: tools, tool_choice and a tool conversation's messages
// are read; what the server cannot honour is refused by name.
TEST(OpenAiRequestTest, ToolsAndToolConversationsAreRead) {
  ApiError error;
  auto request = ParseChatRequest(
      R"({"messages": [{"role": "user", "content": "Weather in Paris?"},
                       {"role": "assistant", "content": null,
                        "tool_calls": [{"id": "call_1", "type": "function",
                                        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                       {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}],
          "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Today's weather",
                     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
                    {"type": "function", "function": {"name": "get-time"}}],
          "tool_choice": "auto", "parallel_tool_calls": false})",
      &error);
  ASSERT_TRUE(request.has_value()) << error.message;
  EXPECT_THAT(request->tool_names, ElementsAre("get_weather", "get-time"));
  ASSERT_TRUE(request->tools.has_value());
  EXPECT_EQ(request->tools->items().size(), 2u);
  EXPECT_EQ(request->tool_choice, "auto");
  EXPECT_FALSE(request->parallel_tool_calls);
  ASSERT_EQ(request->messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(request->messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(request->messages[1].tool_calls[0].arguments, R"({"city": "Paris"})");
  EXPECT_EQ(request->messages[1].content, "");
  EXPECT_EQ(request->messages[2].tool_call_id, "call_1");
  // Note [Required tool calls]: "required", a named function (strict or
  // not), and strict tools under auto (the server holds each call).
  for (const std::string choice : {R"("required")", R"({"type": "function", "function": {"name": "f"}})", R"("auto")"}) {
    auto required = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": )" + choice +
                                         R"(, "tools": [{"type": "function", "function": {"name": "f", "strict": true}}]})",
                                     &error);
    ASSERT_TRUE(required.has_value()) << error.message;
    EXPECT_EQ(required->tool_choice, choice == R"("required")" ? "required" : choice == R"("auto")" ? "auto" : "function");
    EXPECT_EQ(required->tool_choice_function, choice[0] == '{' ? "f" : "");
    EXPECT_TRUE(required->strict_tools);
  }

  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  struct Case {
    std::string body, param, message;
  };
  for (const Case& c : std::vector<Case>{
           {"{" + user + R"(, "tool_choice": "required"})", "tool_choice", "tool_choice: \"required\" needs tools"},
           {"{" + user + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}})", "tool_choice",
            "tool_choice: a named function needs tools"},
           {"{" + user + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}},
                "tools": [{"type": "function", "function": {"name": "f"}}]})",
            "tool_choice", "the function 'g' is not among the tools (f)"},
           {"{" + user + R"(, "tool_choice": {"type": "function", "name": "f"},
                "tools": [{"type": "function", "function": {"name": "f"}}]})",
            "tool_choice", "expected auto, none, required or {\"type\": \"function\""},
           {"{" + user + R"(, "tool_choice": "sometimes"})", "tool_choice", "not one of auto, none, required"},
           {"{" + user + R"(, "tools": [{"type": "retrieval"}]})", "tools", "tools[0]: expected {\"type\": \"function\""},
           {"{" + user + R"(, "tools": [{"type": "function", "function": {"name": "two words"}}]})", "tools",
            "tools[0].function.name: 'two words' is not 1 to 64"},
           {"{" + user + R"(, "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]})",
            "tools", "tools[1].function.name: 'f' is given twice"},
           {"{" + user + R"(, "functions": [{"name": "f"}]})", "functions", "give tools"},
           {R"({"messages": [{"role": "tool", "content": "18 C"}]})", "messages", "needs the tool_call_id it answers"},
           {R"({"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]})", "messages",
            "only a tool's message answers a call"},
           {R"({"messages": [{"role": "user", "content": "x", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]}]})",
            "messages", "only an assistant's message makes tool calls"},
           {R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{oops"}}]}]})",
            "messages", "messages[0].tool_calls[0].function.arguments: not the JSON text of an object"},
           {R"({"messages": [{"role": "assistant", "content": null}]})", "messages", "messages[0]: no content"},
           {"{" + user + R"(, "tools": []})", "tools", "an empty one"},
           {"{" + user + R"(, "tool_choice": "auto"})", "tool_choice", "needs tools"},
           {R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}", "x": 1}}]}]})",
            "messages", "messages[0].tool_calls[0].function: unknown field 'x'"},
       }) {
    const ApiError got = ChatError(c.body);
    EXPECT_EQ(got.param, c.param) << c.body;
    EXPECT_THAT(got.message, HasSubstr(c.message)) << c.body;
  }
  // /v1/completions has no tools.
  EXPECT_THAT(CompletionError(R"({"prompt": "x", "tools": []})").message, HasSubstr("/v1/chat/completions only"));
}

}  // namespace
}  // namespace dslaunch::runtime

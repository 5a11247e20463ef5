// The response bodies parse as JSON with OpenAI's fields: several choices,
// log-probabilities in each endpoint's form, and the streamed chunks.
#include "runtime/serve/openai_response.h"

#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {
namespace {

JsonValue Parsed(const std::string& json) {
  auto parsed = ParseJson(json, "response");
  EXPECT_TRUE(parsed.ok()) << parsed.status() << "\n" << json;
  return parsed.ok() ? *parsed : JsonValue();
}

std::vector<TokenLogprobs> TwoTokens() {
  // The second token's alternatives include two with one text: kept once.
  return {TokenLogprobs{{" a", -0.25}, {{" a", -0.25}, {"b", -1.5}}, 0},
          TokenLogprobs{{"\xC3", -std::numeric_limits<double>::infinity()},
                        {{"x", -0.1}, {"\xC3", -2.0}, {"\xC3", -3.0}},
                        2}};
}

TEST(OpenAiResponseTest, BodiesAreJsonInOpenAisShapes) {
  ResponseHeader header{"cmpl-1", 1700000000, "tiny"};
  ChoiceOutput one{0, "a \"quoted\"\nline", "length", std::nullopt};
  JsonValue completion = Parsed(CompletionJson(header, {one}, {3, 4}));
  EXPECT_EQ(completion.Find("object")->string_value(), "text_completion");
  const JsonValue& choice = completion.Find("choices")->items()[0];
  EXPECT_EQ(choice.Find("text")->string_value(), "a \"quoted\"\nline");
  EXPECT_EQ(choice.Find("finish_reason")->string_value(), "length");
  EXPECT_TRUE(choice.Find("logprobs")->is_null());
  EXPECT_EQ(completion.Find("usage")->Find("total_tokens")->number_value(), 7);

  JsonValue chat = Parsed(ChatCompletionJson(header, {ChoiceOutput{0, "hi", "stop", std::nullopt}}, {1, 1}));
  EXPECT_EQ(chat.Find("object")->string_value(), "chat.completion");
  EXPECT_EQ(chat.Find("choices")->items()[0].Find("message")->Find("role")->string_value(), "assistant");

  JsonValue first = Parsed(ChatChunkJson(header, ChoiceOutput{2, "", "", std::nullopt}, "assistant", true));
  const JsonValue& first_choice = first.Find("choices")->items()[0];
  EXPECT_TRUE(first_choice.Find("finish_reason")->is_null());
  EXPECT_EQ(first_choice.Find("index")->number_value(), 2);
  EXPECT_EQ(first_choice.Find("delta")->Find("role")->string_value(), "assistant");
  EXPECT_EQ(first_choice.Find("delta")->Find("content")->string_value(), "");
  JsonValue last = Parsed(ChatChunkJson(header, ChoiceOutput{0, "", "stop", std::nullopt}, std::nullopt, false));
  EXPECT_TRUE(last.Find("choices")->items()[0].Find("delta")->keys().empty());

  JsonValue usage = Parsed(UsageChunkJson(header, "text_completion", {2, 5}));
  EXPECT_TRUE(usage.Find("choices")->items().empty());

  JsonValue error = Parsed(ErrorJson(ApiError{400, "invalid_request_error", "max_tokens", "bad", ""}));
  EXPECT_EQ(error.Find("error")->Find("param")->string_value(), "max_tokens");
  EXPECT_TRUE(error.Find("error")->Find("code")->is_null());
  EXPECT_EQ(ServerSentEvent("{}"), "data: {}\n\n");
}

// Note [Tool calls]: a message of calls has content null (or its text) and
// tool_calls; a streamed delta carries each call whole, with its index.
TEST(OpenAiResponseTest, ToolCallsInOpenAisShapes) {
  ResponseHeader header{"chatcmpl-1", 1700000000, "tiny"};
  ChoiceOutput called{0, "", "tool_calls", std::nullopt,
                      {{"call_a", "get_weather", R"({"city": "Paris"})"}, {"call_b", "get_time", "{}"}}};
  JsonValue chat = Parsed(ChatCompletionJson(header, {called}, {5, 9}));
  const JsonValue& choice = chat.Find("choices")->items()[0];
  EXPECT_EQ(choice.Find("finish_reason")->string_value(), "tool_calls");
  const JsonValue& message = *choice.Find("message");
  EXPECT_TRUE(message.Find("content")->is_null());
  const JsonValue& calls = *message.Find("tool_calls");
  ASSERT_EQ(calls.items().size(), 2u);
  EXPECT_EQ(calls.items()[0].Find("id")->string_value(), "call_a");
  EXPECT_EQ(calls.items()[0].Find("type")->string_value(), "function");
  EXPECT_EQ(calls.items()[0].Find("function")->Find("name")->string_value(), "get_weather");
  EXPECT_EQ(calls.items()[0].Find("function")->Find("arguments")->string_value(), R"({"city": "Paris"})");
  EXPECT_EQ(calls.items()[0].Find("index"), nullptr);
  called.text = "Let me check.";
  EXPECT_EQ(Parsed(ChatCompletionJson(header, {called}, {5, 9})).Find("choices")->items()[0].Find("message")->Find(
                "content")->string_value(),
            "Let me check.");

  ChoiceOutput delta{0, "", "", std::nullopt, {{"call_a", "get_weather", "{}"}, {"call_b", "get_time", "{}"}}};
  JsonValue chunk = Parsed(ChatChunkJson(header, delta, std::nullopt, false));
  const JsonValue& streamed = *chunk.Find("choices")->items()[0].Find("delta");
  EXPECT_EQ(streamed.Find("content"), nullptr);
  ASSERT_EQ(streamed.Find("tool_calls")->items().size(), 2u);
  EXPECT_EQ(streamed.Find("tool_calls")->items()[1].Find("index")->number_value(), 1);
  EXPECT_EQ(streamed.Find("tool_calls")->items()[1].Find("id")->string_value(), "call_b");
  // No calls: the message as before, content a string.
  JsonValue plain = Parsed(ChatCompletionJson(header, {ChoiceOutput{0, "", "stop", std::nullopt}}, {1, 1}));
  const JsonValue& plain_message = *plain.Find("choices")->items()[0].Find("message");
  EXPECT_EQ(plain_message.Find("content")->string_value(), "");
  EXPECT_EQ(plain_message.Find("tool_calls"), nullptr);
}

TEST(OpenAiResponseTest, SeveralChoicesKeepTheirIndexes) {
  ResponseHeader header{"cmpl-2", 1, "tiny"};
  JsonValue completion = Parsed(CompletionJson(
      header, {ChoiceOutput{0, "x", "stop", std::nullopt}, ChoiceOutput{1, "y", "length", std::nullopt}}, {1, 2}));
  ASSERT_EQ(completion.Find("choices")->items().size(), 2u);
  EXPECT_EQ(completion.Find("choices")->items()[1].Find("index")->number_value(), 1);
  EXPECT_EQ(completion.Find("choices")->items()[1].Find("text")->string_value(), "y");
  JsonValue chunk = Parsed(CompletionChunkJson(header, ChoiceOutput{3, "z", "", std::nullopt}));
  EXPECT_EQ(chunk.Find("choices")->items()[0].Find("index")->number_value(), 3);
}

TEST(OpenAiResponseTest, CompletionLogprobsAreTheLegacyColumns) {
  ResponseHeader header{"cmpl-3", 1, "tiny"};
  JsonValue body = Parsed(CompletionJson(header, {ChoiceOutput{0, " a\xC3", "length", TwoTokens()}}, {1, 2}));
  const JsonValue& logprobs = *body.Find("choices")->items()[0].Find("logprobs");
  ASSERT_EQ(logprobs.Find("tokens")->items().size(), 2u);
  EXPECT_EQ(logprobs.Find("tokens")->items()[0].string_value(), " a");
  EXPECT_EQ(logprobs.Find("tokens")->items()[1].string_value(), "\xEF\xBF\xBD") << "a byte that is not UTF-8";
  EXPECT_EQ(logprobs.Find("token_logprobs")->items()[0].number_value(), -0.25);
  EXPECT_EQ(logprobs.Find("token_logprobs")->items()[1].number_value(), -9999.0);
  const JsonValue& second = logprobs.Find("top_logprobs")->items()[1];
  ASSERT_EQ(second.keys().size(), 2u) << "one text, one key";
  EXPECT_EQ(second.Find("x")->number_value(), -0.1);
  EXPECT_EQ(second.Find("\xEF\xBF\xBD")->number_value(), -2.0);
  EXPECT_EQ(logprobs.Find("text_offset")->items()[1].number_value(), 2);
}

TEST(OpenAiResponseTest, ChatLogprobsCarryEachTokensBytes) {
  ResponseHeader header{"chatcmpl-4", 1, "tiny"};
  JsonValue body = Parsed(ChatCompletionJson(header, {ChoiceOutput{0, " a", "stop", TwoTokens()}}, {1, 2}));
  const JsonValue& content = *body.Find("choices")->items()[0].Find("logprobs")->Find("content");
  ASSERT_EQ(content.items().size(), 2u);
  EXPECT_EQ(content.items()[0].Find("token")->string_value(), " a");
  EXPECT_EQ(content.items()[0].Find("logprob")->number_value(), -0.25);
  ASSERT_EQ(content.items()[1].Find("bytes")->items().size(), 1u);
  EXPECT_EQ(content.items()[1].Find("bytes")->items()[0].number_value(), 0xC3) << "the raw byte";
  const JsonValue& top = *content.items()[1].Find("top_logprobs");
  ASSERT_EQ(top.items().size(), 3u) << "every alternative, in order";
  EXPECT_EQ(top.items()[2].Find("logprob")->number_value(), -3.0);
  // A streamed chunk carries its tokens' entries.
  JsonValue chunk = Parsed(ChatChunkJson(header, ChoiceOutput{1, " a", "", TwoTokens()}, std::nullopt, true));
  EXPECT_EQ(chunk.Find("choices")->items()[0].Find("logprobs")->Find("content")->items().size(), 2u);
}

TEST(OpenAiResponseTest, LogprobsReadBackAsTheSameDouble) {
  ResponseHeader header{"chatcmpl-5", 1, "tiny"};
  const double value = -0.1 - 1e-13;
  std::vector<TokenLogprobs> entries = {TokenLogprobs{{"q", value}, {}, 0}};
  JsonValue body = Parsed(ChatCompletionJson(header, {ChoiceOutput{0, "q", "stop", entries}}, {1, 1}));
  EXPECT_EQ(body.Find("choices")->items()[0].Find("logprobs")->Find("content")->items()[0].Find("logprob")->number_value(),
            value);
}

}  // namespace
}  // namespace dslaunch::runtime

// Note [Tool calls]: the calls read out of answers in each format, the
// answers that stay content (malformed, truncated, a tool not offered, text
// around a llama3 call), and how much of an answer streams as content.
#include "runtime/serve/tool_call_parser.h"

#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const std::vector<std::string> kTools = {"get_weather", "get_time"};

MATCHER_P2(Call, name, arguments, "") { return arg.name == name && arg.arguments == arguments; }

TEST(ToolCallParserTest, HermesCallsAfterContent) {
  const ToolCallReading reading = ReadToolCalls(
      ToolCallFormat::kHermes,
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\":2}}\n"
      "</tool_call>\n<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>",
      kTools);
  EXPECT_EQ(reading.content, "Let me look.\n");
  EXPECT_THAT(reading.calls, ElementsAre(Call("get_weather", R"({"city": "Paris", "days": 2})"),
                                         Call("get_time", "{}")));
}

// A string inside a call may hold the closing tag's text: the call ends at
// the first tag after which it reads as a call.
TEST(ToolCallParserTest, HermesArgumentsMayHoldTheClosingTag) {
  const ToolCallReading reading = ReadToolCalls(
      ToolCallFormat::kHermes,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a </tool_call> b\"}}\n</tool_call>"
      "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>",
      kTools);
  EXPECT_EQ(reading.content, "");
  EXPECT_THAT(reading.calls, ElementsAre(Call("get_weather", R"({"city": "a </tool_call> b"})"),
                                         Call("get_time", "{}")));
}

// A key repeated in the arguments: the last value, as json.loads reads it
// (an object of any keys may repeat one: Note [Constrained output]).
TEST(ToolCallParserTest, ARepeatedArgumentTakesItsLastValue) {
  const ToolCallReading reading = ReadToolCalls(
      ToolCallFormat::kHermes,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\", \"days\": 1, \"city\": \"B\"}}\n"
      "</tool_call>",
      kTools);
  EXPECT_THAT(reading.calls, ElementsAre(Call("get_weather", R"({"city": "B", "days": 1})")));
}

TEST(ToolCallParserTest, HermesTextAroundTheCallsIsContent) {
  const ToolCallReading reading = ReadToolCalls(
      ToolCallFormat::kHermes,
      "A.<tool_call>{\"name\": \"get_time\"}</tool_call>\n<tool_call>{\"name\": \"get_time\"}</tool_call> B.",
      kTools);
  EXPECT_EQ(reading.content, "A. B.");  // the blank between the calls is not
  EXPECT_THAT(reading.calls, ElementsAre(Call("get_time", "{}"), Call("get_time", "{}")));
}

TEST(ToolCallParserTest, HermesLastCallMayBeUnclosedAndArgumentsMayBeQuoted) {
  const ToolCallReading reading = ReadToolCalls(
      ToolCallFormat::kHermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": \"{\\\"zone\\\": \\\"UTC\\\"}\"}",
      kTools);
  EXPECT_EQ(reading.content, "");
  EXPECT_THAT(reading.calls, ElementsAre(Call("get_time", R"({"zone": "UTC"})")));
}

TEST(ToolCallParserTest, AnswersThatAreNotCallsStayContent) {
  for (const std::string& text : {
           std::string("no call here"),
           std::string("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": "),  // cut short
           std::string("<tool_call>{\"name\": \"launch_rocket\", \"arguments\": {}}</tool_call>"),  // not offered
           std::string("<tool_call>{\"name\": \"get_time\", \"arguments\": [1]}</tool_call>"),  // not an object
           std::string("<tool_call>{\"name\": \"get_time\"}</tool_call><tool_call>oops</tool_call>"),  // one bad
       }) {
    const ToolCallReading reading = ReadToolCalls(ToolCallFormat::kHermes, text, kTools);
    EXPECT_EQ(reading.content, text);
    EXPECT_THAT(reading.calls, IsEmpty()) << text;
  }
}

TEST(ToolCallParserTest, Llama3JsonCalls) {
  EXPECT_THAT(ReadToolCalls(ToolCallFormat::kLlama3Json,
                            " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", kTools)
                  .calls,
              ElementsAre(Call("get_weather", R"({"city": "Oslo"})")));
  // The python tag, several calls, a ';' inside a string.
  const ToolCallReading two = ReadToolCalls(
      ToolCallFormat::kLlama3Json,
      "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"zone\": \"a;b\"}}; {\"name\": \"get_weather\", "
      "\"arguments\": {}}",
      kTools);
  EXPECT_EQ(two.content, "");
  EXPECT_THAT(two.calls, ElementsAre(Call("get_time", R"({"zone": "a;b"})"), Call("get_weather", "{}")));
  // Text first, a tool not offered, or something after the call: content.
  for (const std::string& text : {std::string("Sure: {\"name\": \"get_time\", \"parameters\": {}}"),
                                  std::string("{\"name\": \"nope\", \"parameters\": {}}"),
                                  std::string("{\"name\": \"get_time\", \"parameters\": {}} and more")}) {
    const ToolCallReading reading = ReadToolCalls(ToolCallFormat::kLlama3Json, text, kTools);
    EXPECT_EQ(reading.content, text);
    EXPECT_THAT(reading.calls, IsEmpty()) << text;
  }
}

// A call ends where its JSON is back at the top level, so each call is
// parsed once: an answer holding 20,000 closing tags or ';'s inside strings
// (a model can be led to write them) reads in linear time. Parsing every
// prefix, as the parser once did, took seconds here; the bound is generous.
TEST(ToolCallParserTest, SeparatorsInsideStringsCostOneParse) {
  std::string many;
  for (int i = 0; i < 20000; ++i) many += "x</tool_call>;";
  const std::string hermes = "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"zone\": \"" + many +
                             "\"}}</tool_call>";
  const std::string llama = "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"" + many +
                            "\"}}; {\"name\": \"get_weather\", \"parameters\": {}};";
  const auto start = std::chrono::steady_clock::now();
  const ToolCallReading a = ReadToolCalls(ToolCallFormat::kHermes, hermes, kTools);
  const ToolCallReading b = ReadToolCalls(ToolCallFormat::kLlama3Json, llama, kTools);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, "{\"zone\": \"" + many + "\"}");
  ASSERT_EQ(b.calls.size(), 2u);
  EXPECT_EQ(b.calls[1].name, "get_weather");
  // Brackets inside strings do not count, escaped quotes do not end them.
  EXPECT_THAT(ReadToolCalls(ToolCallFormat::kLlama3Json,
                            R"({"name": "get_time", "parameters": {"zone": "}]\";{"}}; {"name": "get_weather"})", kTools)
                  .calls,
              ElementsAre(Call("get_time", R"({"zone": "}]\";{"})"), Call("get_weather", "{}")));
}

TEST(ToolCallParserTest, StreamedContentStopsWhereACallMayBegin) {
  EXPECT_EQ(ContentBeforeAnyCall(ToolCallFormat::kHermes, "Hello"), 5u);
  EXPECT_EQ(ContentBeforeAnyCall(ToolCallFormat::kHermes, "Hello <tool"), 6u);      // may be a call
  EXPECT_EQ(ContentBeforeAnyCall(ToolCallFormat::kHermes, "Hello <tooth>"), 13u);   // is not
  EXPECT_EQ(ContentBeforeAnyCall(ToolCallFormat::kHermes, "Hi <tool_call>{\"na"), 3u);
  EXPECT_EQ(ContentBeforeAnyCall(ToolCallFormat::kLlama3Json, "  "), 0u);
  EXPECT_EQ(ContentBeforeAnyCall(ToolCallFormat::kLlama3Json, " {\"name"), 0u);
  EXPECT_EQ(ContentBeforeAnyCall(ToolCallFormat::kLlama3Json, "<|pyth"), 0u);
  EXPECT_EQ(ContentBeforeAnyCall(ToolCallFormat::kLlama3Json, " The answer"), 11u);
}

// A streamed answer: content goes out as it comes until a call may begin;
// the held text comes out as calls, or as content when it was none.
TEST(ToolCallParserTest, AStreamedAnswerHoldsBackOnlyWhatMayBeACall) {
  ToolCallStream calls(ToolCallFormat::kHermes, kTools);
  std::string out;
  for (const std::string piece : {"Checking", " <to", "ol_call>{\"name\": \"get_time\", ", "\"arguments\": {}}",
                                  "</tool_call>"}) {
    out += calls.Add(piece);
  }
  EXPECT_EQ(out, "Checking ");
  const ToolCallReading called = calls.Finish();
  EXPECT_EQ(called.content, "");
  EXPECT_THAT(called.calls, ElementsAre(Call("get_time", "{}")));

  ToolCallStream plain(ToolCallFormat::kHermes, kTools);
  out.clear();
  for (const std::string piece : {"a <", "b> <tool_call>{broken"}) out += plain.Add(piece);
  EXPECT_EQ(out, "a <b> ");
  const ToolCallReading broken = plain.Finish();
  EXPECT_THAT(broken.calls, IsEmpty());
  EXPECT_EQ(out + broken.content, "a <b> <tool_call>{broken");

  ToolCallStream llama(ToolCallFormat::kLlama3Json, kTools);
  EXPECT_EQ(llama.Add(" {\"name\": \"get_weather\","), "");
  EXPECT_EQ(llama.Add(" \"parameters\": {}}"), "");
  EXPECT_THAT(llama.Finish().calls, ElementsAre(Call("get_weather", "{}")));
  ToolCallStream prose(ToolCallFormat::kLlama3Json, kTools);
  EXPECT_EQ(prose.Add(" "), "");
  EXPECT_EQ(prose.Add("It is {sunny}"), " It is {sunny}");
  EXPECT_EQ(prose.Finish().content, "");
}

TEST(ToolCallParserTest, FormatsAreNamed) {
  EXPECT_EQ(*ParseToolCallFormat("hermes"), ToolCallFormat::kHermes);
  EXPECT_EQ(*ParseToolCallFormat("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_THAT(std::string(ParseToolCallFormat("mistral").status().message()), HasSubstr("hermes, llama3_json"));
}

}  // namespace
}  // namespace dslaunch::runtime

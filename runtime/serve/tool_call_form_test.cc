// Note [Required tool calls]: the call forms of both parsers, each name's
// arguments held to its own schema (definitions and refs included), read
// back as calls by the parser; parameters the decoder cannot hold refused
// naming the tool; under tool_choice auto, text with each call in it held
// (random walks over a vocabulary of call pieces, read back by the parser).
#include "runtime/serve/tool_call_form.h"

#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

JsonValue Tools() {
  return *ParseJson(R"([
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
       "properties": {"city": {"type": "string"}, "unit": {"$ref": "#/$defs/unit"}}, "required": ["city"],
       "additionalProperties": false, "$defs": {"unit": {"enum": ["c", "f"]}}}}},
      {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
       "properties": {"zone": {"type": "string", "maxLength": 8}}, "required": ["zone"]}}},
      {"type": "function", "function": {"name": "ping"}}])",
                    "tools");
}

// 1: whole; 0: a prefix; -1: not.
int Judge(const OutputConstraint& form, const std::string& text) {
  bool complete = false;
  if (!AllowsPrefix(form, text, &complete)) return -1;
  return complete ? 1 : 0;
}

TEST(ToolCallFormTest, RequiredCallsAreHermesTagsAroundOneCallOfAnyTool) {
  auto form = ToolCallConstraint(ToolCallFormat::kHermes, Tools(), {"get_weather", "get_time", "ping"});
  ASSERT_TRUE(form.ok()) << form.status();
  EXPECT_EQ(form->before, "<tool_call>\n");
  EXPECT_EQ(form->after, "\n</tool_call>");
  const std::string weather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>";
  EXPECT_EQ(Judge(*form, weather), 1);
  EXPECT_EQ(Judge(*form, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"), 1);
  EXPECT_EQ(Judge(*form, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>"), 1);
  for (size_t cut = 0; cut < weather.size(); ++cut) EXPECT_EQ(Judge(*form, weather.substr(0, cut)), 0) << cut;
  EXPECT_EQ(Judge(*form, "Sure! <tool_call>"), -1);  // a call, nothing before it
  EXPECT_EQ(Judge(*form, "<tool_call>\n{\"name\": \"get_news\""), -1);
  EXPECT_EQ(Judge(*form, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"zone\""), -1);  // get_time's
  EXPECT_EQ(Judge(*form, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": \"k\""), -1);
  EXPECT_EQ(Judge(*form, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"x\""), -1);
  EXPECT_EQ(Judge(*form, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}</tool_call>"), -1);
  EXPECT_EQ(Judge(*form, weather + " "), -1);  // the answer ends with the call
  // The parser reads it back as the call.
  const ToolCallReading reading = ReadToolCalls(ToolCallFormat::kHermes, weather, {"get_weather", "get_time", "ping"});
  ASSERT_EQ(reading.calls.size(), 1u);
  EXPECT_EQ(reading.calls[0].name, "get_weather");
  EXPECT_EQ(reading.calls[0].arguments, R"({"city": "Paris", "unit": "c"})");
}

TEST(ToolCallFormTest, ANamedFunctionInLlama3JsonIsThatToolsCallAlone) {
  auto form = ToolCallConstraint(ToolCallFormat::kLlama3Json, Tools(), {"get_time"});
  ASSERT_TRUE(form.ok()) << form.status();
  EXPECT_EQ(form->before, "");
  EXPECT_EQ(form->after, "");
  const std::string call = R"({"name": "get_time", "parameters": {"zone": "Europe/P"}})";
  EXPECT_EQ(Judge(*form, call), 1);
  EXPECT_EQ(Judge(*form, R"({"name": "get_weather")"), -1);
  EXPECT_EQ(Judge(*form, R"({"name": "get_time", "arguments")"), -1);  // llama3_json's key is parameters
  EXPECT_EQ(Judge(*form, R"({"name": "get_time", "parameters": {"zone": "Europe/Pa)"), -1);  // maxLength 8
  const ToolCallReading reading = ReadToolCalls(ToolCallFormat::kLlama3Json, call, {"get_weather", "get_time"});
  ASSERT_EQ(reading.calls.size(), 1u);
  EXPECT_EQ(reading.calls[0].arguments, R"({"zone": "Europe/P"})");
}

TEST(ToolCallFormTest, ArgumentsAreAnObjectAndTheirSchemaKeepsItsMeaning) {
  auto tools = ParseJson(R"([
      {"type": "function", "function": {"name": "any", "parameters": {}}},
      {"type": "function", "function": {"name": "data", "parameters": {"type": "object",
       "properties": {"s": {"enum": [{"$ref": "#"}]}}, "required": ["s"]}}},
      {"type": "function", "function": {"name": "both", "parameters": {"type": "object",
       "properties": {"a": {"$ref": "#/$defs/X"}, "b": {"$ref": "#/definitions/X"}}, "required": ["a", "b"],
       "$defs": {"X": {"type": "string"}}, "definitions": {"X": {"type": "integer"}}}}}])",
                         "tools");
  ASSERT_TRUE(tools.ok());
  auto form = ToolCallConstraint(ToolCallFormat::kLlama3Json, *tools, {"any", "data", "both"});
  ASSERT_TRUE(form.ok()) << form.status();
  // {} as parameters: any object, nothing else (the parser reads objects only).
  EXPECT_EQ(Judge(*form, R"({"name": "any", "parameters": {"k": [1]}})"), 1);
  EXPECT_EQ(Judge(*form, R"({"name": "any", "parameters": null)"), -1);
  EXPECT_EQ(Judge(*form, R"({"name": "any", "parameters": "x)"), -1);
  // A "$ref" inside an enum's value is data, not a reference.
  EXPECT_EQ(Judge(*form, R"({"name": "data", "parameters": {"s": {"$ref":"#"}}})"), 1);
  // $defs and definitions may share a name; each ref keeps its own.
  EXPECT_EQ(Judge(*form, R"({"name": "both", "parameters": {"a": "x", "b": 2}})"), 1);
  EXPECT_EQ(Judge(*form, R"({"name": "both", "parameters": {"a": 2)"), -1);
  // A schema that allows more than objects is refused, naming the tool.
  auto nullable = ParseJson(R"([{"type": "function", "function": {"name": "n", "parameters":
      {"type": ["object", "null"]}}}])", "tools");
  EXPECT_THAT(ToolCallConstraint(ToolCallFormat::kHermes, *nullable, {"n"}).status().message(),
              HasSubstr("tools[0].function.parameters: the arguments of a call are a JSON object"));
}

TEST(ToolCallFormTest, ParametersTheDecoderCannotHoldAreRefusedNamingTheTool) {
  auto tools = ParseJson(R"([{"type": "function", "function": {"name": "a"}},
      {"type": "function", "function": {"name": "b", "parameters": {"type": "object",
       "properties": {"n": {"type": "string", "format": "uri"}}}}}])",
                         "tools");
  ASSERT_TRUE(tools.ok());
  EXPECT_THAT(ToolCallConstraint(ToolCallFormat::kHermes, *tools, {"a", "b"}).status().message(),
              HasSubstr("tools[1].function.parameters: schema/properties/n/format: format 'uri' is not supported"));
  // Not called: not read.
  EXPECT_TRUE(ToolCallConstraint(ToolCallFormat::kHermes, *tools, {"a"}).ok());
}

// The tools with get_weather and get_time strict (ping is not).
JsonValue StrictTools() {
  JsonValue tools = Tools();
  std::string text = SerializeJson(tools);
  for (const std::string name : {"get_weather", "get_time"}) {
    const std::string named = "\"name\":\"" + name + "\"";
    text.replace(text.find(named), named.size(), named + ",\"strict\":true");
  }
  return *ParseJson(text, "tools");
}

TEST(ToolCallFormTest, UnderAutoTheTextIsFreeAndEachCallInItIsHeld) {
  auto form = ToolCallsInTextConstraint(ToolCallFormat::kHermes, StrictTools(), {"get_weather", "get_time", "ping"});
  ASSERT_TRUE(form.ok()) << form.status();
  EXPECT_EQ(form->kind, OutputConstraint::Kind::kStructuralTag);
  const std::string call = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>";
  EXPECT_EQ(Judge(*form, "It is sunny."), 1);
  EXPECT_EQ(Judge(*form, "Let me look. " + call + "\n" + call + " Done."), 1);
  EXPECT_EQ(Judge(*form, "Let me look. <tool_call>\n{\"name\": \"get_news\""), -1);
  EXPECT_EQ(Judge(*form, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"Europe/Paris\""), -1);
  EXPECT_EQ(Judge(*form, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}"), 0);
  // ping is not strict: its arguments are any object (OpenAI's best effort).
  EXPECT_EQ(Judge(*form, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"x\": [1]}}\n</tool_call>"), 1);
  EXPECT_EQ(Judge(*form, "<tool_call>\n{\"name\": \"ping\", \"arguments\": 3"), -1);
}

// The calls of a llama3_json answer that begins with '{', counted apart
// from the parser: one more than its ';'s outside strings and brackets.
size_t CallsOfLlama3Answer(const std::string& text) {
  size_t calls = 1;
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ';' && depth == 0) {
      ++calls;
    }
  }
  return calls;
}

// Note [JSON or text]: in llama3_json a call is the whole answer, which the
// parser reads as calls when it begins with '{': text otherwise (a brace
// later in it is text), a held call from a first '{' on.
TEST(ToolCallFormTest, UnderAutoALlama3AnswerIsACallWhenItBeginsWithABrace) {
  auto form = ToolCallsInTextConstraint(ToolCallFormat::kLlama3Json, StrictTools(), {"get_weather", "get_time", "ping"});
  ASSERT_TRUE(form.ok()) << form.status();
  EXPECT_EQ(form->kind, OutputConstraint::Kind::kJsonSchema);
  EXPECT_TRUE(form->or_text);
  EXPECT_EQ(Judge(*form, ""), 1);
  EXPECT_EQ(Judge(*form, "  \n"), 1);
  EXPECT_EQ(Judge(*form, "It is sunny. {\"name\": \"get_news\"}"), 1);  // text: the parser reads no call in it
  EXPECT_EQ(Judge(*form, " {\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}"), 1);
  EXPECT_EQ(Judge(*form, "{\"name\": \"get_news\""), -1);
  EXPECT_EQ(Judge(*form, "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"Europe/Paris\""), -1);
  EXPECT_EQ(Judge(*form, "{\"name\": \"get_time\", \"arguments\""), -1);  // llama3_json's key is parameters
  EXPECT_EQ(Judge(*form, "{\"name\": \"ping\", \"parameters\": {\"x\": [1]}}"), 1);  // not strict: any object
  const std::string call = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}";
  EXPECT_EQ(Judge(*form, call), 1);
  // Several calls, ';'-separated as the parser splits them; never ending
  // just after a ';', and nothing but blanks and ';' between calls.
  const std::string time = "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}";
  EXPECT_EQ(Judge(*form, call + ";"), 0);
  EXPECT_EQ(Judge(*form, call + " ; \n" + time + "\n"), 1);
  EXPECT_EQ(Judge(*form, call + ";" + time + ";" + call), 1);
  EXPECT_EQ(Judge(*form, call + "; {\"name\": \"get_news\""), -1);
  EXPECT_EQ(Judge(*form, call + " and"), -1);
  EXPECT_EQ(Judge(*form, call + ";;"), -1);
  const ToolCallReading two =
      ReadToolCalls(ToolCallFormat::kLlama3Json, call + " ; \n" + time, {"get_weather", "get_time", "ping"});
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[1].name, "get_time");
  const ToolCallReading reading = ReadToolCalls(ToolCallFormat::kLlama3Json, call, {"get_weather", "get_time", "ping"});
  ASSERT_EQ(reading.calls.size(), 1u);
  EXPECT_EQ(reading.calls[0].arguments, R"({"city": "Paris", "unit": "c"})");
  // Random answers over pieces of calls and text: each whole one is either
  // a call the parser reads, with arguments of its schema, or content.
  std::vector<std::string> pieces = {"{", "}", "\"", ": ", ", ", "name", "parameters", "\"get_weather\"", "get_time",
                                     "\"ping\"", "city", "unit", "zone", "\"c\"", "Paris", "UTC", " ", "\n",
                                     "Hello", "{\"name\": \"", "; ", "", ""};
  for (int c = ' '; c <= '~'; ++c) pieces.emplace_back(1, static_cast<char>(c));
  const int64_t stop = 23;  // the second empty one
  auto vocabulary = std::make_shared<const TokenVocabulary>(pieces);
  std::mt19937 random(7);
  int calls = 0, texts = 0, several = 0;
  for (int walk = 0; walk < 600; ++walk) {
    auto state = StartOutputConstraint(*form, vocabulary, "tools");
    ASSERT_TRUE(state.ok()) << state.status();
    std::string text;
    for (int step = 0; step < 200 && !(*state)->Finished(); ++step) {
      torch::Tensor logits = torch::zeros({vocabulary->size()});
      ASSERT_TRUE((*state)->Mask(logits, {stop})) << text;
      std::vector<int64_t> allowed;
      const auto masked = logits.accessor<float, 1>();
      for (int64_t id = 0; id < vocabulary->size(); ++id) {
        if (std::isinf(masked[id])) continue;
        const int weight = id < 22 || id == stop ? 6 : 1;  // pieces of calls (and the end) weigh more
        allowed.insert(allowed.end(), static_cast<size_t>(weight), id);
      }
      const int64_t token = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(random)];
      if (token == stop && step < 3) continue;
      (*state)->Accept(token);
      if (token == stop) break;
      text += vocabulary->bytes(token);
    }
    SCOPED_TRACE(text);
    if (!(*state)->Complete()) continue;  // cut inside a call
    const ToolCallReading read = ReadToolCalls(ToolCallFormat::kLlama3Json, text, {"get_weather", "get_time", "ping"});
    const bool brace = absl::StartsWith(absl::StripLeadingAsciiWhitespace(text), "{");
    if (!brace) {
      ASSERT_TRUE(read.calls.empty());
      EXPECT_EQ(read.content, text);
      ++texts;
      continue;
    }
    ASSERT_EQ(read.calls.size(), CallsOfLlama3Answer(text));
    ++calls;
    several += read.calls.size() > 1 ? 1 : 0;
    for (const ParsedToolCall& call : read.calls) {
      auto arguments = ParseJson(call.arguments, "arguments");
      ASSERT_TRUE(arguments.ok() && arguments->is_object()) << call.arguments;
      if (call.name == "get_weather") ASSERT_NE(arguments->Find("city"), nullptr);
      if (call.name == "get_time") ASSERT_NE(arguments->Find("zone"), nullptr);
    }
  }
  EXPECT_GT(calls, 15) << "too few calls written for the walks to test anything";
  EXPECT_GT(several, 5) << "too few answers of several calls";
  EXPECT_GT(texts, 10);
}

// The calls in hermes text, read apart from the parser: from each
// <tool_call> in free text, a newline, one JSON value (its end found by its
// brackets, outside strings), then "\n</tool_call>". -1 when one is not so.
int64_t CallsInText(const std::string& text) {
  int64_t calls = 0;
  for (size_t at = text.find("<tool_call>"); at != std::string::npos; at = text.find("<tool_call>", at)) {
    at += std::string("<tool_call>\n").size();
    if (text.compare(at - 1, 1, "\n") != 0) return -1;
    while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
    const size_t value = at;
    int depth = 0;
    bool in_string = false;
    for (; at < text.size(); ++at) {
      const char c = text[at];
      if (in_string) {
        if (c == '\\') ++at;
        if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        break;
      }
    }
    if (at >= text.size() || !ParseJsonLastKeyWins(text.substr(value, at + 1 - value), "call").ok()) return -1;
    if (text.compare(at + 1, 13, "\n</tool_call>") != 0) return -1;
    at += 14;
    ++calls;
  }
  return calls;
}

// Random walks under the auto form over a vocabulary of call pieces, text
// and special tokens: whatever the walk writes, the hermes parser reads
// every <tool_call> in it as a call of a tool, with arguments of its schema.
TEST(ToolCallFormTest, RandomTextUnderAutoParsesIntoValidCalls) {
  const std::vector<std::string> names = {"get_weather", "get_time", "ping"};
  // ping is not strict: its arguments are any object, whose keys may repeat
  // (RFC 8259 allows it; the parser reads the last, as json.loads does).
  auto form = ToolCallsInTextConstraint(ToolCallFormat::kHermes, StrictTools(), names);
  ASSERT_TRUE(form.ok()) << form.status();
  std::vector<std::string> bytes = {"<tool_call>", "<tool", "_call>", "<tool_call>\n", "<tool_call>\n{\"", "\n",
                                    "\n</tool_call>", "</tool_call>", "{", "}", "\"", ": ", ", ", "name", "arguments",
                                    "\"get_weather\"", "get_time", "\"ping\"", "city", "unit", "zone", "\"c\"",
                                    "\"f\"", "Paris", "UTC", "ab", " ", "Hello", "<", ">", "x<tool_call>\n",
                                    "tool_call", "\\", "\\u00e9", "", ""};
  for (int c = ' '; c <= '~'; ++c) bytes.emplace_back(1, static_cast<char>(c));  // every text has a way on
  const int64_t stop = 35;  // the second empty one; 34 is a special token that prints nothing
  auto vocabulary = std::make_shared<const TokenVocabulary>(bytes);
  std::mt19937 random(2026);
  int calls_read = 0;
  for (int walk = 0; walk < 300; ++walk) {
    auto state = StartOutputConstraint(*form, vocabulary, "tools");
    ASSERT_TRUE(state.ok()) << state.status();
    std::string text;
    for (int step = 0; step < 400; ++step) {
      torch::Tensor logits = torch::zeros({vocabulary->size()});
      ASSERT_TRUE((*state)->Mask(logits, {stop})) << text;
      std::vector<int64_t> allowed;
      const auto masked = logits.accessor<float, 1>();
      for (int64_t id = 0; id < vocabulary->size(); ++id) {
        if (std::isinf(masked[id])) continue;
        // Pieces of calls weigh more, so that calls open and close.
        const int weight = vocabulary->bytes(id).find('<') != std::string::npos || id < 25 ? 4 : 1;
        allowed.insert(allowed.end(), static_cast<size_t>(weight), id);
      }
      const int64_t token = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(random)];
      const bool ending = token == stop;
      if (ending && step < 20) continue;  // some text first
      (*state)->Accept(token);
      if (ending) break;
      text += vocabulary->bytes(token);
    }
    SCOPED_TRACE(text);
    if (!(*state)->Complete()) continue;  // cut inside a call: the parser would keep it as text
    const ToolCallReading reading = ReadToolCalls(ToolCallFormat::kHermes, text, names);
    ASSERT_EQ(reading.calls.size(), CallsInText(text));
    for (const ParsedToolCall& read : reading.calls) {
      auto arguments = ParseJson(read.arguments, "arguments");  // written back without repeats
      ASSERT_TRUE(arguments.ok() && arguments->is_object()) << read.arguments;
      if (read.name == "get_weather") {
        ASSERT_NE(arguments->Find("city"), nullptr) << read.arguments;
        for (size_t k = 0; k < arguments->keys().size(); ++k) {
          EXPECT_TRUE(arguments->keys()[k] == "city" || arguments->keys()[k] == "unit") << read.arguments;
        }
        if (const JsonValue* unit = arguments->Find("unit")) {
          EXPECT_TRUE(unit->is_string() && (unit->string_value() == "c" || unit->string_value() == "f"));
        }
      } else if (read.name == "get_time") {
        const JsonValue* zone = arguments->Find("zone");
        ASSERT_TRUE(zone != nullptr && zone->is_string()) << read.arguments;
        const std::string& value = zone->string_value();
        EXPECT_LE(std::count_if(value.begin(), value.end(), [](char c) { return (c & 0xC0) != 0x80; }), 8)
            << "maxLength 8 code points";
      } else {
        EXPECT_EQ(read.name, "ping");  // any object
      }
    }
    calls_read += static_cast<int>(reading.calls.size());
  }
  EXPECT_GT(calls_read, 20) << "too few calls written for the walks to test anything";
}

}  // namespace
}  // namespace dslaunch::runtime

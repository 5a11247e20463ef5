// Note [Required tool calls]: the call forms of both parsers, each name's
// arguments held to its own schema (definitions and refs included), read
// back as calls by the parser; parameters the decoder cannot hold refused
// naming the tool.
#include "runtime/serve/tool_call_form.h"

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
       "properties": {"n": {"type": "string", "pattern": "^a"}}}}}])",
                         "tools");
  ASSERT_TRUE(tools.ok());
  EXPECT_THAT(ToolCallConstraint(ToolCallFormat::kHermes, *tools, {"a", "b"}).status().message(),
              HasSubstr("tools[1].function.parameters: schema/properties/n: 'pattern' is not supported"));
  // Not called: not read.
  EXPECT_TRUE(ToolCallConstraint(ToolCallFormat::kHermes, *tools, {"a"}).ok());
}

}  // namespace
}  // namespace dslaunch::runtime

#include "runtime/data/json_text.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

std::string StringAt(const YAML::Node& node, const std::string& key) {
  EXPECT_TRUE(IsJsonString(node[key])) << key;
  return node[key].Scalar();
}

TEST(JsonTextTest, EscapesDecodeToUtf8IncludingSurrogatePairs) {
  // Python's json.dump writes non-ASCII this way by default (ensure_ascii).
  auto value = ParseJsonValue(R"({"a": "caf\u00e9 \ud83d\ude00!", "b": "tab\there \"q\" \\ \/", "c": "\u4e2d"})");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(StringAt(*value, "a"), "caf\xC3\xA9 \xF0\x9F\x98\x80!");
  EXPECT_EQ(StringAt(*value, "b"), "tab\there \"q\" \\ /");
  EXPECT_EQ(StringAt(*value, "c"), "\xE4\xB8\xAD");
}

TEST(JsonTextTest, AnEscapedBackslashBeforeUIsNotAnEscape) {
  auto value = ParseJsonValue(R"({"a": "\\ud83d and \\u00e9"})");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(StringAt(*value, "a"), "\\ud83d and \\u00e9");
}

TEST(JsonTextTest, LoneSurrogatesAreErrors) {
  EXPECT_THAT(ParseJsonValue(R"({"a": "x\ud83d"})").status().message(),
              HasSubstr("\\ud83d is half of a UTF-16 surrogate pair"));
  EXPECT_THAT(ParseJsonValue(R"({"a": "\ude00x"})").status().message(), HasSubstr("line 1, column 8"));
  EXPECT_THAT(ParseJsonValue(R"({"a": "\ud83d\u0041"})").status().message(), HasSubstr("surrogate"));
}

TEST(JsonTextTest, SyntaxErrorsSayWhere) {
  auto value = ParseJsonValue("{\"a\": \"x\",\n \"b\": [1, 2}");
  ASSERT_FALSE(value.ok());
  EXPECT_THAT(value.status().message(), HasSubstr("invalid JSON (line 2"));
}

TEST(JsonTextTest, WhatYamlAcceptsButJsonDoesNotIsRefused) {
  struct Case {
    const char* text;
    const char* what;
  };
  for (const Case& c : {
           Case{R"({"a": "x"} {"b": 1})", "(line 1, column 12): text after the JSON value"},
           Case{R"({"a": "x"} trailing)", "text after the JSON value"},
           Case{R"({a: "x"})", "(line 1, column 2): 'a' is not a JSON value (strings are in double quotes)"},
           Case{R"({"a": yes})", "'yes' is not a JSON value"},
           Case{R"({"a": 'x'})", "''' is not JSON"},
           Case{"{\"a\": \"x\" # note\n}", "'#' is not JSON"},
           Case{"{\"a\": \"line\nbreak\"}", "(line 1, column 12): a raw control character (U+000A) in a string"},
           Case{"]", "']' without its opening bracket"},
           Case{R"({"a": "x", "b": {"c": 1, "c": 2}})", "key 'b.c' appears twice"},
       }) {
    auto value = ParseJsonValue(c.text);
    ASSERT_FALSE(value.ok()) << c.text;
    EXPECT_THAT(value.status().message(), HasSubstr(c.what)) << c.text;
  }
  // Numbers, booleans, null and nesting stay valid.
  auto value = ParseJsonValue(R"( {"n": -1.5e+3, "t": true, "f": false, "z": null, "l": [0, {"k": [1]}]} )");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ((*value)["n"].Scalar(), "-1.5e+3");
}

TEST(JsonTextTest, StringsAreToldApartFromOtherScalars) {
  auto value = ParseJsonValue(R"({"s": "5", "n": 5, "b": true, "z": null, "l": [], "o": {}})");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(IsJsonString((*value)["s"]));
  EXPECT_FALSE(IsJsonString((*value)["n"]));
  EXPECT_FALSE(IsJsonString((*value)["b"]));
  EXPECT_EQ(DescribeJsonType((*value)["s"]), "a string");
  EXPECT_EQ(DescribeJsonType((*value)["n"]), "the value 5");
  EXPECT_EQ(DescribeJsonType((*value)["b"]), "the value true");
  EXPECT_EQ(DescribeJsonType((*value)["z"]), "null");
  EXPECT_EQ(DescribeJsonType((*value)["l"]), "a list");
  EXPECT_EQ(DescribeJsonType((*value)["o"]), "an object");
  EXPECT_EQ(DescribeJsonType((*value)["missing"]), "null");
}

TEST(JsonTextTest, JsonLinesAreSplitByLineSkippingBlankOnes) {
  auto records = SplitRecords("\xEF\xBB\xBF{\"a\": 1}\n\n  \n{\"a\": 2}\r\n{\"a\": \"]\"}");
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 3u);
  EXPECT_EQ((*records)[0].line, 1);
  EXPECT_EQ((*records)[0].text, "{\"a\": 1}");
  EXPECT_EQ((*records)[1].line, 4);
  EXPECT_EQ((*records)[1].text, "{\"a\": 2}\r");
  EXPECT_EQ((*records)[2].line, 5);
}

TEST(JsonTextTest, ArrayElementsKeepTheLineTheyStartOn) {
  const std::string text =
      "[\n"
      "  {\"a\": \"x, ] } {\", \"b\": [1, {\"c\": 2}]},\n"
      "  {\n"
      "    \"a\": \"\\\"}\"\n"
      "  }  ,  \"plain\"\n"
      "]\n";
  auto records = SplitRecords(text);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 3u);
  EXPECT_EQ((*records)[0].line, 2);
  EXPECT_EQ((*records)[0].text, "{\"a\": \"x, ] } {\", \"b\": [1, {\"c\": 2}]}");
  EXPECT_EQ((*records)[1].line, 3);
  EXPECT_EQ((*records)[1].text, "{\n    \"a\": \"\\\"}\"\n  }");
  EXPECT_EQ((*records)[2].line, 5);
  EXPECT_EQ((*records)[2].text, "\"plain\"");
  auto empty = SplitRecords("  [ ] ");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(JsonTextTest, BrokenArraysAreErrorsNamingTheLine) {
  EXPECT_THAT(SplitRecords("[\n{\"a\": 1},\n{\"a\": \"open\n").status().message(),
              HasSubstr("the element starting at line 3 has an unterminated string"));
  EXPECT_THAT(SplitRecords("[\n{\"a\": 1}").status().message(), HasSubstr("not closed"));
  EXPECT_THAT(SplitRecords("[{\"a\": 1},\n]").status().message(), HasSubstr("line 2): an empty element"));
  EXPECT_THAT(SplitRecords("[{\"a\": 1}] x").status().message(), HasSubstr("text after the array"));
}

}  // namespace
}  // namespace dslaunch::runtime

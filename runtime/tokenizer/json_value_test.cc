#include "runtime/tokenizer/json_value.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

TEST(JsonValueTest, ParsesEveryKindInOrder) {
  absl::StatusOr<JsonValue> value =
      ParseJson(R"( {"b": [1, -2.5e1, true, false, null], "a": {"x": "y"}, "c": 0} )", "t.json");
  ASSERT_TRUE(value.ok()) << value.status();
  ASSERT_TRUE(value->is_object());
  EXPECT_EQ(value->keys(), (std::vector<std::string>{"b", "a", "c"}));
  const JsonValue& b = *value->Find("b");
  ASSERT_EQ(b.items().size(), 5u);
  EXPECT_EQ(b.items()[0].number_value(), 1);
  EXPECT_EQ(b.items()[1].number_value(), -25);
  EXPECT_TRUE(b.items()[2].bool_value());
  EXPECT_FALSE(b.items()[3].bool_value());
  EXPECT_TRUE(b.items()[4].is_null());
  EXPECT_EQ(value->Find("a")->Find("x")->string_value(), "y");
  EXPECT_EQ(value->Find("missing"), nullptr);
}

TEST(JsonValueTest, DecodesEscapesAndSurrogatePairs) {
  absl::StatusOr<JsonValue> value =
      ParseJson(R"(["\u0120\u00e9\n\t\"\\\/", "\ud83e\udd99", "raw é 🦙"])", "t.json");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->items()[0].string_value(), "\xC4\xA0\xC3\xA9\n\t\"\\/");
  EXPECT_EQ(value->items()[1].string_value(), "\xF0\x9F\xA6\x99");  // U+1F999, one code point
  EXPECT_EQ(value->items()[2].string_value(), "raw \xC3\xA9 \xF0\x9F\xA6\x99");
}

TEST(JsonValueTest, SerializesCompactlyAndReadsBackEqual) {
  const std::string text = R"({"b":[1,-25,0.1,1e+21,true,false,null],"a":{"x":"y\n\"é"},"":[]})";
  absl::StatusOr<JsonValue> value = ParseJson(R"( {"b": [1.0, -2.5e1, 0.1, 1e21, true, false, null],
      "a": {"x": "y\n\"\u00e9"}, "": [ ]} )", "t.json");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(SerializeJson(*value), text);
  absl::StatusOr<JsonValue> again = ParseJson(text, "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(SerializeJson(*again), text);
}

TEST(JsonValueTest, RefusesWhatSerdeRefuses) {
  struct Case {
    const char* text;
    const char* problem;
  };
  for (const Case& c : {Case{R"(["\ud83e"])", "followed by a low one"}, Case{R"(["\udd99"])", "lone low surrogate"},
                        Case{R"({"a": 1, "a": 2})", "duplicate key \"a\""}, Case{"[1] 2", "text after the JSON value"},
                        Case{"[\"a\tb\"]", "raw control character"}, Case{"[\"\xC3\"]", "UTF-8"},
                        Case{"[\"\xC0\xAF\"]", "invalid UTF-8"}, Case{"[01]", "expected ',' or ']'"},
                        Case{"[1,]", "unexpected character"}, Case{"{\"a\" 1}", "expected ':'"},
                        Case{"[tru]", "invalid literal"}, Case{"[\"\\x\"]", "invalid escape"}, Case{"", "end of input"}}) {
    absl::StatusOr<JsonValue> value = ParseJson(c.text, "t.json");
    ASSERT_FALSE(value.ok()) << c.text;
    EXPECT_THAT(value.status().message(), HasSubstr(c.problem)) << c.text;
    EXPECT_THAT(value.status().message(), HasSubstr("t.json:1:")) << c.text;
  }
}

TEST(JsonValueTest, FindsDuplicatesInLargeObjects) {
  std::string text = "{";
  for (int i = 0; i < 100; ++i) text += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ",";
  text += "\n\"k57\": 0}";
  absl::StatusOr<JsonValue> value = ParseJson(text, "vocab.json");
  ASSERT_FALSE(value.ok());
  EXPECT_THAT(value.status().message(), HasSubstr("vocab.json:2:1: duplicate key \"k57\""));
}

// A model's text: a repeated key's last value stands in its first place,
// as Python's json.loads reads it, in small objects and large ones.
TEST(JsonValueTest, LastKeyWinsWhereAskedFor) {
  auto small = ParseJsonLastKeyWins(R"({"a": 1, "b": [2], "a": {"c": 3}})", "t");
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(SerializeJson(*small), R"({"a":{"c":3},"b":[2]})");
  std::string text = "{";
  for (int i = 0; i < 40; ++i) text += "\"k" + std::to_string(i % 20) + "\": " + std::to_string(i) + ",";
  text += "\"z\": 0}";
  auto large = ParseJsonLastKeyWins(text, "t");
  ASSERT_TRUE(large.ok()) << large.status();
  ASSERT_EQ(large->keys().size(), 21u);
  EXPECT_EQ(large->keys()[3], "k3");
  EXPECT_EQ(large->items()[3].number_value(), 23);
  EXPECT_FALSE(ParseJson(R"({"a": 1, "a": 2})", "t").ok()) << "the strict reader still refuses it";
}

TEST(JsonValueTest, RefusesDeepNesting) {
  absl::StatusOr<JsonValue> value = ParseJson(std::string(1000, '[') + std::string(1000, ']'), "t.json");
  ASSERT_FALSE(value.ok());
  EXPECT_THAT(value.status().message(), HasSubstr("nested deeper than 256"));
}

}  // namespace
}  // namespace dslaunch::runtime

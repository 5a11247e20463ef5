#include "runtime/config/config_document.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const std::string& text, ConfigSyntax syntax = ConfigSyntax::kYaml) {
  auto parsed = ParseConfigDocument(text, "cfg", syntax);
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(ConfigDocument, OneDocumentParses) {
  auto node = ParseConfigDocument("---\na: 1\nb: [1, {c: 2}]\n...\n", "cfg", ConfigSyntax::kYaml);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)["b"][1]["c"].as<int>(), 2);
  EXPECT_TRUE(ParseConfigDocument("", "cfg", ConfigSyntax::kYaml).ok());  // empty: every default
  EXPECT_TRUE(ParseConfigDocument("# only a comment\n", "cfg", ConfigSyntax::kYaml).ok());
}

// Before: YAML::Load kept the first document, so b was dropped without a word.
TEST(ConfigDocument, ASecondDocumentIsAnErrorAtItsLine) {
  EXPECT_EQ(ErrorOf("a: 1\n---\nb: 2\n"),
            "cfg:2: a second YAML document starts here; a config holds exactly one (remove the '---')");
  EXPECT_THAT(ErrorOf("---\na: 1\n---\n"), HasSubstr("cfg:3: a second YAML document"));
  EXPECT_THAT(ErrorOf("{\"a\": 1}\n---\n{\"b\": 2}\n", ConfigSyntax::kJson),
              HasSubstr("cfg:2: a second YAML document"));
}

// Before: YAML flow syntax allowed these, so a .json that Python's json
// module refuses was accepted.
TEST(ConfigDocument, JsonTrailingCommasAreErrorsAtTheComma) {
  EXPECT_EQ(ErrorOf("{\n  \"a\": 1,\n}\n", ConfigSyntax::kJson),
            "cfg:2:9: trailing comma before '}' (JSON allows none)");
  EXPECT_EQ(ErrorOf("{\"a\": [1, 2, ]}", ConfigSyntax::kJson),
            "cfg:1:12: trailing comma before ']' (JSON allows none)");
  EXPECT_EQ(ErrorOf("{\"a\": 1, # comment\n\n }", ConfigSyntax::kJson),
            "cfg:1:8: trailing comma before '}' (JSON allows none)");
  // Commas inside strings, and YAML files, are not JSON's business.
  EXPECT_EQ(ErrorOf("{\"a\": \"x,}\", \"b\": \"\\\",]\", \"c\": 'it''s,]'}", ConfigSyntax::kJson), "");
  EXPECT_EQ(ErrorOf("{\"a#b\": \"1,}\"}", ConfigSyntax::kJson), "");
  EXPECT_EQ(ErrorOf("a: {b: 1,}\n"), "");
}

// Before: 1,000 levels gave yaml-cpp's "bad file" at line 1, column 1.
TEST(ConfigDocument, NestingIsBoundedWithThePlace) {
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_EQ(ErrorOf(nested(kMaxConfigNestingDepth)), "");
  EXPECT_EQ(ErrorOf(nested(kMaxConfigNestingDepth + 1)),
            "cfg:1:65: nested more than 64 levels deep, the most a config may nest");
  EXPECT_EQ(ErrorOf(nested(1000), ConfigSyntax::kJson),
            "cfg:1:65: nested more than 64 levels deep, the most a config may nest");
  std::string block;
  for (int i = 0; i < 100; ++i) absl::StrAppend(&block, std::string(2 * i, ' '), "k", i, ":\n");
  EXPECT_THAT(ErrorOf(block), HasSubstr("cfg:65:129: nested more than 64 levels deep"));
}

TEST(ConfigDocument, SyntaxErrorsKeepLineAndColumn) {
  EXPECT_THAT(ErrorOf("a: [1, 2\n"), HasSubstr("cfg:"));
  EXPECT_THAT(ErrorOf("a: [1, 2\n"), HasSubstr("not valid YAML or JSON"));
}

TEST(ConfigDocument, SyntaxFollowsTheFileName) {
  EXPECT_EQ(ConfigSyntaxOf("ds_config.json"), ConfigSyntax::kJson);
  EXPECT_EQ(ConfigSyntaxOf("DS.JSON"), ConfigSyntax::kJson);
  EXPECT_EQ(ConfigSyntaxOf("train.cfg"), ConfigSyntax::kYaml);
  EXPECT_EQ(ConfigSyntaxOf("ds.yaml"), ConfigSyntax::kYaml);
}

}  // namespace
}  // namespace dslaunch::runtime

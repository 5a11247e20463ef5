#include "runtime/tokenizer/unicode_regex.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> Matches(const UnicodeRegex& regex, const std::string& text) {
  std::vector<std::string> out;
  for (auto [begin, end] : regex.FindAll(text)) out.push_back(text.substr(begin, end - begin));
  return out;
}

TEST(UnicodeRegexTest, SplitsAsLlama3Does) {
  auto regex = UnicodeRegex::Compile(kLlama3Pattern);
  ASSERT_TRUE(regex.ok()) << regex.status();
  EXPECT_THAT(Matches(**regex, "I'M café 1234567!!  \n\tx"),
              ElementsAre("I", "'M", " café", " ", "123", "456", "7", "!!", "  \n", "\tx"));
  // A letter run takes one non-letter, non-newline character before it.
  EXPECT_THAT(Matches(**regex, "日本語 Привет"), ElementsAre("日本語", " Привет"));
  EXPECT_THAT(Matches(**regex, "trailing   "), ElementsAre("trailing", "   "));
}

TEST(UnicodeRegexTest, InvalidUtf8IsLeftBetweenMatches) {
  auto regex = UnicodeRegex::Compile(R"(\p{L}+)");
  ASSERT_TRUE(regex.ok());
  EXPECT_THAT(Matches(**regex, "ab\xFF" "cd"), ElementsAre("ab", "cd"));
}

TEST(UnicodeRegexTest, ABadPatternIsNamed) {
  auto regex = UnicodeRegex::Compile("(unclosed");
  ASSERT_FALSE(regex.ok());
  EXPECT_THAT(regex.status().message(), HasSubstr("regex \"(unclosed\" does not compile"));
}

}  // namespace
}  // namespace dslaunch::runtime

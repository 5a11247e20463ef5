// Note [Constrained output]: the JSON form's verdict on whole texts agrees
// with the strict JSON reader (runtime/tokenizer/json_value.h) on objects,
// on what is not JSON, and on texts cut or changed at every byte; and
// TokenBytesOf gives the byte tokenizer's tokens as the form steps them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "runtime/generate/output_constraint.h"
#include "runtime/tokenizer/json_value.h"
#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {
namespace {

// Whether the form takes `text` as one whole object.
bool FormSaysWhole(const std::string& text) {
  bool complete = false;
  return AllowsPrefix(OutputConstraint::JsonObject(), text, &complete) && complete;
}

// Whether the strict reader reads `text` as an object. It also refuses a
// key given twice in one object, which RFC 8259 allows (names "SHOULD" be
// unique) and the form does too (Note [Constrained output]): such a text
// counts as an object here.
bool ReaderSaysObject(const std::string& text) {
  auto parsed = ParseJson(text, "text");
  if (!parsed.ok()) return absl::StrContains(parsed.status().message(), "duplicate");
  return parsed->is_object();
}

TEST(ConstrainedJsonTest, TheFormAgreesWithTheStrictReader) {
  const std::vector<std::string> seeds = {
      R"({})",
      R"({"a": [1, -2.5e+3, 0, 0.25, true, false, null, "x\u00e9\n\"\\\/"], "b": {}, "c": [[]]})",
      "{\"t\": \"caf\xC3\xA9 \xE2\x82\xAC\", \"n\": -0.0e-0}",
      R"({"k":{"k":{"k":[1,{"z":null}]}}})",
  };
  int checked = 0;
  for (const std::string& seed : seeds) {
    ASSERT_TRUE(ReaderSaysObject(seed)) << seed;
    EXPECT_TRUE(FormSaysWhole(seed)) << seed;
    // Every cut, and every single-byte change to bytes that matter in JSON.
    for (size_t at = 0; at <= seed.size(); ++at) {
      const std::string cut = seed.substr(0, at);
      EXPECT_EQ(FormSaysWhole(cut), ReaderSaysObject(cut)) << "cut: " << cut;
      ++checked;
      if (at == seed.size()) continue;
      for (char c : std::string("{}[]:,\"\\ 0-1e.tnx\x01")) {
        std::string changed = seed;
        changed[at] = c;
        EXPECT_EQ(FormSaysWhole(changed), ReaderSaysObject(changed)) << "changed: " << changed;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(ConstrainedJsonTest, TheByteTokenizersTokensAreItsAsciiBytes) {
  ByteTokenizer tokenizer;
  const std::vector<std::string> bytes = TokenBytesOf(tokenizer);
  ASSERT_EQ(bytes.size(), 257u);
  EXPECT_EQ(bytes['{'], "{");
  EXPECT_EQ(bytes[' '], " ");
  EXPECT_EQ(bytes[0xC3], "") << "half a character alone";
  EXPECT_EQ(bytes[256], "") << "eos has no text";
  EXPECT_TRUE(IsWholeUtf8("caf\xC3\xA9"));
  EXPECT_FALSE(IsWholeUtf8("caf\xC3"));
  EXPECT_FALSE(IsWholeUtf8("\xEF\xBF\xBD"));
  EXPECT_TRUE(IsWholeUtf8("\xED\x9F\xBF\xF4\x8F\xBF\xBF"));
  for (const char* bad : {"\xC0\x80", "\xE0\x80\x80", "\xED\xA0\x80", "\xF0\x80\x80\x80", "\xF4\x90\x80\x80"}) {
    EXPECT_FALSE(IsWholeUtf8(bad)) << "overlong, a surrogate or past U+10FFFF";
  }
}

}  // namespace
}  // namespace dslaunch::runtime

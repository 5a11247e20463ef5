// Note [The text of one token]: a token reads as what it adds in context.
#include "runtime/serve/token_text.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/serve/serve_test_tokenizers.h"

namespace dslaunch::runtime {
namespace {

// Llama 2's decoder strips the space of a sequence's first word-start piece:
// "▁a" is "a" first and " a" after another token (the prompt's too), as in
// the whole decode; an alternative reads in the same context.
TEST(TokenTextsTest, TheTextsJoinedAreTheDecodeOfTheGeneratedTokens) {
  auto tokenizer = TinyTokenizer(kTinyLlama2Json);
  //   0 <unk>  1 <s>  2 </s>  3 <0x0A>  4 <0xC3>  5 <0xA9>  6 ▁  7 a  8 b  9 ▁a  10 ab  11 ▁ab
  TokenTexts texts(*tokenizer, {});
  EXPECT_EQ(texts.Text(9), "a");
  texts.Push(11);
  EXPECT_EQ(texts.Text(9), " a");
  EXPECT_EQ(texts.Text(10), "ab");
  EXPECT_EQ(texts.Text(3), "\n");
  const std::vector<int32_t> generated = {11, 9, 8, 11, 3, 9, 10, 11};
  TokenTexts fresh(*tokenizer, {});
  std::string joined;
  for (int32_t id : generated) {
    joined += fresh.Text(id);
    fresh.Push(id);
  }
  EXPECT_EQ(joined, tokenizer->Decode(generated));
  // After a prompt, the first token reads as it does there.
  TokenTexts after_prompt(*tokenizer, {1, 8, 8, 8, 8, 8});
  EXPECT_EQ(after_prompt.Text(9), " a");
  EXPECT_EQ(after_prompt.Text(8), "b");
}

TEST(TokenTextsTest, ATokenThatIsPartOfACharacterReadsAsItsBytes) {
  ByteTokenizer tokenizer;
  TokenTexts texts(tokenizer, {'o', 'k'});
  EXPECT_EQ(texts.Text(0xC3), "\xC3");
  texts.Push(0xC3);
  EXPECT_EQ(texts.Text(0xA9), "\xA9");
  EXPECT_EQ(texts.Text('x'), "x");
}

}  // namespace
}  // namespace dslaunch::runtime

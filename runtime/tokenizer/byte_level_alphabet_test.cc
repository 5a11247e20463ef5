#include "runtime/tokenizer/byte_level_alphabet.h"

#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

TEST(ByteLevelAlphabetTest, MatchesGpt2) {
  EXPECT_EQ(ByteLevelCodePoint(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(ByteLevelCodePoint('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(ByteLevelCodePoint(0), 0x100u);
  EXPECT_EQ(ByteLevelCodePoint('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(ByteLevelCodePoint(0xAD), 0x143u);  // soft hyphen, the last remapped byte
  EXPECT_EQ(ByteLevelCodePoint(0xE9), 0xE9u);   // 'é' stands for itself
  EXPECT_EQ(BytesToByteLevel("a b\n"), "a\xC4\xA0" "b\xC4\x8A");
}

TEST(ByteLevelAlphabetTest, IsABijection) {
  for (int b = 0; b < 256; ++b) {
    std::optional<uint8_t> back = ByteLevelByte(ByteLevelCodePoint(static_cast<uint8_t>(b)));
    ASSERT_TRUE(back.has_value()) << b;
    EXPECT_EQ(*back, b);
  }
  EXPECT_FALSE(ByteLevelByte(0x20).has_value());   // space is not in the alphabet
  EXPECT_FALSE(ByteLevelByte(0x144).has_value());  // past the 68 remapped bytes
  EXPECT_FALSE(ByteLevelByte(0x1F999).has_value());
}

}  // namespace
}  // namespace dslaunch::runtime

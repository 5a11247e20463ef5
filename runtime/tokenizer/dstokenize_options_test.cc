#include "runtime/tokenizer/dstokenize_options.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

TEST(DstokenizeOptionsTest, BosFollowsTheModelUnlessAsked) {
  auto command = ParseDstokenizeArgs({"--tokenizer", "models/llama"});
  ASSERT_TRUE(command.ok()) << command.status();
  EXPECT_EQ(command->options.tokenizer, "models/llama");
  EXPECT_EQ(command->options.add_bos, std::nullopt);
  EXPECT_EQ(command->options.add_eos, std::nullopt);
  command = ParseDstokenizeArgs({"--tokenizer=t.json", "--no_bos", "--add_eos", "--plain_text", "--json_lines"});
  ASSERT_TRUE(command.ok()) << command.status();
  EXPECT_EQ(command->options.add_bos, false);
  EXPECT_EQ(command->options.add_eos, true);
  EXPECT_TRUE(command->options.plain_text);
  EXPECT_TRUE(command->options.json_lines);
}

TEST(DstokenizeOptionsTest, ErrorsNameTheFlag) {
  EXPECT_THAT(ParseDstokenizeArgs({}).status().message(), HasSubstr("--tokenizer is required"));
  EXPECT_THAT(ParseDstokenizeArgs({"--tokenizer", "t", "--add_bos", "--no_bos"}).status().message(),
              HasSubstr("--add_bos and --no_bos contradict"));
  EXPECT_THAT(ParseDstokenizeArgs({"--tokenizer", "t", "--add_bso"}).status().message(), HasSubstr("--add_bso"));
  EXPECT_THAT(ParseDstokenizeArgs({"--tokenizer", "t", "extra"}).status().message(), HasSubstr("unexpected argument"));
  EXPECT_TRUE(ParseDstokenizeArgs({"--help"})->help);
}

}  // namespace
}  // namespace dslaunch::runtime

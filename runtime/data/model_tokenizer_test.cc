#include "runtime/data/model_tokenizer.h"

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

TEST(ModelTokenizerTest, TokenizerJsonComesBeforeTokenizerModel) {
  TestTempDir dir;
  ASSERT_TRUE(FileSystem::Default().CreateDirectories(dir.File("llama2")).ok());
  const std::string sp = dir.Write("llama2/tokenizer.model", "x");
  auto only_sp = FindModelTokenizer(dir.File("llama2"));
  ASSERT_TRUE(only_sp.ok()) << only_sp.status();
  EXPECT_EQ(only_sp->kind, "sentencepiece");
  EXPECT_EQ(only_sp->path, sp);
  const std::string json = dir.Write("llama2/tokenizer.json", "{}");
  auto both = FindModelTokenizer(dir.File("llama2"));
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->kind, "hf");
  EXPECT_EQ(both->path, json);
  EXPECT_THAT(FindModelTokenizer("").status().message(), HasSubstr("needs the model folder"));
}

TEST(ModelTokenizerTest, LoadErrorsNameTheFolderAndFile) {
  TestTempDir dir;
  ASSERT_TRUE(FileSystem::Default().CreateDirectories(dir.File("broken")).ok());
  dir.Write("broken/tokenizer.model", "not a sentencepiece model");
  auto tokenizer = LoadPreparationTokenizer("model", "", dir.File("broken"));
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(),
              HasSubstr("the tokenizer of model folder " + dir.File("broken") + " (" + dir.File("broken/tokenizer.model")));
  EXPECT_THAT(LoadPreparationTokenizer("sentencepiece", "", "").status().message(), HasSubstr("--sp_model"));
  auto bytes = LoadPreparationTokenizer("byte", "", "");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ((*bytes)->name(), "byte");
}

}  // namespace
}  // namespace dslaunch::runtime

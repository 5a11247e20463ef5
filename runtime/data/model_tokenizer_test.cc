#include "runtime/data/model_tokenizer.h"

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

TEST(ModelTokenizerTest, LoadErrorsNameTheFolderAndFile) {
  TestTempDir dir;
  ASSERT_TRUE(FileSystem::Default().CreateDirectories(dir.File("broken")).ok());
  dir.Write("broken/tokenizer.model", "not a sentencepiece model");
  auto tokenizer = LoadPreparationTokenizer("model", "", dir.File("broken"));
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(),
              HasSubstr("the tokenizer of model folder " + dir.File("broken") + ": "));
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("tokenizer.model"));
  EXPECT_THAT(LoadPreparationTokenizer("model", "", "").status().message(), HasSubstr("needs the model folder"));
  EXPECT_THAT(LoadPreparationTokenizer("sentencepiece", "", "").status().message(), HasSubstr("--sp_model"));
  auto bytes = LoadPreparationTokenizer("byte", "", "");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ((*bytes)->name(), "byte");
}

}  // namespace
}  // namespace dslaunch::runtime

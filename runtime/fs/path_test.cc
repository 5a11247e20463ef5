// Note: this test may use std::filesystem as the reference: fs_tests links
// no LibTorch (file_system.h says why the runtime does not).
#include "runtime/fs/path.h"

#include <filesystem>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

TEST(PathTest, JoinParentAndBaseName) {
  EXPECT_EQ(JoinPath("a", "b"), "a/b");
  EXPECT_EQ(JoinPath("a/", "b"), "a/b");
  EXPECT_EQ(JoinPath("", "b"), "b");
  EXPECT_EQ(JoinPath("a", "/b"), "/b");
  EXPECT_EQ(JoinPath(".", "tokenizer_config.json"), "./tokenizer_config.json");
  EXPECT_EQ(ParentDirectory("a/b"), "a");
  EXPECT_EQ(ParentDirectory("b"), ".");
  EXPECT_EQ(ParentDirectory("/b"), "/");
  EXPECT_EQ(BaseName("/models/llama/"), "llama");
  EXPECT_EQ(BaseName("/models/llama"), "llama");
  EXPECT_EQ(BaseName("llama"), "llama");
  EXPECT_EQ(BaseName("/"), "");
  EXPECT_EQ(BaseName(""), "");
}

TEST(PathTest, LexicallyNormalIsStdFilesystems) {
  for (const char* path : {"", ".", "..", "/", "a/.", "a/./", "a/..", "a/../", "../.", "../a/..", "/..",
                           "/../a", "a/b/../../..", "./a", "a//b", "a/b/.", "x/../..//y/"}) {
    EXPECT_EQ(LexicallyNormal(path), std::filesystem::path(path).lexically_normal().string()) << path;
  }
  // Random paths of names, ".", ".." and runs of separators.
  std::mt19937 random(7);
  const char* pieces[] = {"a", "bc", ".", "..", "/", "//", "d.e", "..."};
  for (int i = 0; i < 20000; ++i) {
    std::string path;
    const int length = std::uniform_int_distribution<int>(0, 8)(random);
    for (int k = 0; k < length; ++k) {
      const std::string piece = pieces[std::uniform_int_distribution<int>(0, 7)(random)];
      // Names are separated: "a" then "bc" would be one name "abc".
      if (!path.empty() && path.back() != '/' && piece.front() != '/') path += '/';
      path += piece;
    }
    // libstdc++ leaves a path of separators alone ("//" stays "//"), against
    // the standard's rule that collapses them: ours gives "/".
    if (!path.empty() && path.find_first_not_of('/') == std::string::npos) {
      ASSERT_EQ(LexicallyNormal(path), "/");
      continue;
    }
    ASSERT_EQ(LexicallyNormal(path), std::filesystem::path(path).lexically_normal().string()) << path;
  }
}

}  // namespace
}  // namespace dslaunch::runtime

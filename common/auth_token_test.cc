#include "common/auth_token.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "." + std::to_string(::getpid()))).string();
}

TEST(AuthToken, GeneratedTokensAreLongAndDistinct) {
  std::string a = GenerateToken(), b = GenerateToken();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
}

TEST(AuthToken, TokensEqualComparesWholeStrings) {
  EXPECT_TRUE(TokensEqual("abcdefgh12345678", "abcdefgh12345678"));
  EXPECT_FALSE(TokensEqual("abcdefgh12345678", "abcdefgh12345679"));
  EXPECT_FALSE(TokensEqual("abcdefgh12345678", "abcdefgh1234567"));
  EXPECT_FALSE(TokensEqual("abc", ""));
  EXPECT_FALSE(TokensEqual("", ""));  // an empty token never authenticates
}

TEST(AuthToken, WriteThenReadRoundTrips) {
  std::string path = TempPath("token_roundtrip");
  std::string token = GenerateToken();
  ASSERT_TRUE(WriteTokenFile(path, token).ok());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto read = ReadTokenFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, token);
  std::filesystem::remove(path);
}

TEST(AuthToken, RefusesFileOthersCanRead) {
  std::string path = TempPath("token_public");
  ASSERT_TRUE(WriteTokenFile(path, GenerateToken()).ok());
  ::chmod(path.c_str(), 0644);
  auto read = ReadTokenFile(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("chmod 600"));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
  std::filesystem::remove(path);
}

TEST(AuthToken, MissingAndShortTokensAreErrorsNamingTheFile) {
  auto missing = ReadTokenFile("/nonexistent/token");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/token"));
  std::string path = TempPath("token_short");
  ASSERT_TRUE(WriteTokenFile(path, "short").ok());
  auto short_token = ReadTokenFile(path);
  ASSERT_FALSE(short_token.ok());
  EXPECT_THAT(std::string(short_token.status().message()), HasSubstr("at least 32 are needed"));
  EXPECT_THAT(std::string(short_token.status().message()), HasSubstr(path));
  std::filesystem::remove(path);
}

TEST(AuthToken, WeakTokensAreRefused) {
  std::string path = TempPath("token_weak");
  // 40 characters of one letter, and a short cycle: long enough, guessable.
  for (const std::string& weak : {std::string(40, 'a'), std::string("abcdabcdabcdabcdabcdabcdabcdabcdabcd")}) {
    ASSERT_TRUE(WriteTokenFile(path, weak).ok());
    auto read = ReadTokenFile(path);
    ASSERT_FALSE(read.ok()) << weak;
    EXPECT_THAT(std::string(read.status().message()), HasSubstr("the token is too predictable"));
    EXPECT_THAT(std::string(read.status().message()), HasSubstr("openssl rand -hex 32"));
  }
  std::filesystem::remove(path);
  EXPECT_LT(TokenEntropyBits(std::string(64, 'z')), 1);
  EXPECT_GT(TokenEntropyBits("0123456789abcdef0123456789abcdef"), 96);  // every hex digit twice: 128 bits
  EXPECT_TRUE(CheckTokenStrength(GenerateToken()).ok());
  // 32 random hex digits (openssl rand -hex 16) pass.
  EXPECT_TRUE(CheckTokenStrength("9f86d081884c7d659a2feaa0c55ad015").ok());
}

TEST(AuthToken, NonRegularFilesAreRefusedByName) {
  EXPECT_EQ(ReadTokenFile("/dev/zero").status().message(),
            "token file /dev/zero: is a character device, not a regular file");
  std::string fifo = TempPath("token_fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(ReadTokenFile(fifo).status().message(), "token file " + fifo + ": is a FIFO, not a regular file");
  std::filesystem::remove(fifo);
}

}  // namespace
}  // namespace dslaunch

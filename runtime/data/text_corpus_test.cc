#include "runtime/data/text_corpus.h"

#include <sys/stat.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/test_temp_dir.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SplitOnPercentLinesTest, SplitsFortunesOnBarePercentLines) {
  EXPECT_THAT(SplitOnPercentLines("A fortune.\n%\nTwo\nlines.\n%\n"),
              ElementsAre("A fortune.\n", "Two\nlines.\n"));
  // "%" inside a line, or with other text, is content; CRLF files work; blank
  // documents between adjacent separators vanish; no final separator needed.
  EXPECT_THAT(SplitOnPercentLines("100% sure\n%%\n%\r\n%\n  \n%\nlast"),
              ElementsAre("100% sure\n%%\n", "last"));
  EXPECT_TRUE(SplitOnPercentLines("%\n%\n").empty());
}

class TextCorpusTest : public ::testing::Test {
 protected:
  TestTempDir dir_;
};

TEST_F(TextCorpusTest, ReadsWholeFilesOrPercentParts) {
  std::string path = dir_.Write("f", "one\n%\ntwo\n");
  auto whole = ReadTextDocuments(path, {});
  ASSERT_TRUE(whole.ok());
  EXPECT_THAT(*whole, ElementsAre("one\n%\ntwo\n"));
  auto parts = ReadTextDocuments(path, {.split_on_percent_lines = true});
  ASSERT_TRUE(parts.ok());
  EXPECT_THAT(*parts, ElementsAre("one\n", "two\n"));
  EXPECT_TRUE(ReadTextDocuments(dir_.Write("blank", " \n\n"), {})->empty());
  EXPECT_THAT(ReadTextDocuments(dir_.File("nope"), {}).status().message(), HasSubstr("nope"));
}

TEST_F(TextCorpusTest, ExpandsGlobsAndDirectoriesSkippingFortuneCompanions) {
  dir_.Write("b", "x");
  dir_.Write("a", "x");
  dir_.Write("a.dat", "binary");
  ASSERT_EQ(::symlink("a", dir_.File("a.u8").c_str()), 0);
  ASSERT_EQ(::mkdir(dir_.File("sub").c_str(), 0755), 0);

  auto globbed = ExpandInputPaths({dir_.File("*")});
  ASSERT_TRUE(globbed.ok()) << globbed.status();
  EXPECT_THAT(*globbed, ElementsAre(dir_.File("a"), dir_.File("b")));

  auto listed = ExpandInputPaths({dir_.path()});
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, ElementsAre(dir_.File("a"), dir_.File("b")));

  // Named explicitly, any file is taken; duplicates are read once.
  auto named = ExpandInputPaths({dir_.File("a.dat"), dir_.File("b"), dir_.File("?")});
  ASSERT_TRUE(named.ok());
  EXPECT_THAT(*named, ElementsAre(dir_.File("a.dat"), dir_.File("b"), dir_.File("a")));
}

TEST_F(TextCorpusTest, InputsThatMatchNothingAreNamed) {
  auto missing = ExpandInputPaths({dir_.File("missing.txt")});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("missing.txt"));

  auto no_match = ExpandInputPaths({dir_.File("*.md")});
  EXPECT_THAT(no_match.status().message(), HasSubstr("*.md"));

  dir_.Write("only.dat", "x");
  auto companions_only = ExpandInputPaths({dir_.File("*.dat")});
  EXPECT_THAT(companions_only.status().message(), HasSubstr("holds no text file"));
}

}  // namespace
}  // namespace dslaunch::runtime

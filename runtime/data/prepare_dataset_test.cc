#include "runtime/data/prepare_dataset.h"

#include <sys/wait.h>

#include <cstdio>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/data/run_command_for_test.h"
#include "runtime/data/dsprep_options.h"
#include "runtime/data/indexed_dataset.h"
#include "runtime/fs/file_system.h"
#include "common/test_temp_dir.h"
#include "runtime/data/text_corpus.h"
#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

// Debian's `fortunes` package: ~24 KB of fortunes separated by "%" lines.
constexpr char kFortunes[] = "/usr/share/games/fortunes/fortunes";

std::vector<int32_t> DocumentTokens(const IndexedDataset& dataset, int64_t document) {
  TokenRange range = dataset.DocumentTokens(document, document + 1);
  std::vector<int32_t> tokens(range.size());
  EXPECT_TRUE(dataset.CopyTokens(range.begin, range.size(), tokens.data()).ok());
  return tokens;
}

class PrepareDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(FileSystem::Default().Exists(kFortunes)) << "install Debian's fortunes"; }

  PrepareOptions FortuneOptions(const std::string& name) const {
    PrepareOptions options;
    options.inputs = {kFortunes};
    options.output_prefix = dir_.File(name);
    options.split_on_percent_lines = true;
    return options;
  }

  TestTempDir dir_;
};

TEST_F(PrepareDatasetTest, BytePreparationOfFortunes) {
  auto summary = PrepareDataset(FortuneOptions("f"));
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->input_files, 1);
  EXPECT_GT(summary->documents, 100);
  EXPECT_GT(summary->tokens, 10000);
  EXPECT_EQ(summary->vocab_size, 257);
  EXPECT_THAT(summary->ToString(), HasSubstr(dir_.File("f.idx")));

  auto dataset = IndexedDataset::Open(dir_.File("f"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->num_documents(), summary->documents);
  EXPECT_EQ((*dataset)->num_tokens(), summary->tokens);

  // Each document is its fortune followed by eos.
  auto fortunes = ReadTextDocuments(kFortunes, {.split_on_percent_lines = true});
  ASSERT_TRUE(fortunes.ok());
  ASSERT_EQ(static_cast<int64_t>(fortunes->size()), summary->documents);
  ByteTokenizer bytes;
  for (int64_t d : {int64_t{0}, summary->documents - 1}) {
    std::vector<int32_t> tokens = DocumentTokens(**dataset, d);
    ASSERT_FALSE(tokens.empty());
    EXPECT_EQ(tokens.back(), ByteTokenizer::kEosId);
    EXPECT_EQ(bytes.Decode(tokens), (*fortunes)[d]);
  }
}

TEST_F(PrepareDatasetTest, TheModelTokenizerIsTheFoldersOwn) {
  ASSERT_TRUE(FileSystem::Default().CreateDirectories(dir_.File("model")).ok());
  ASSERT_TRUE(TrainSentencePieceBpe({kFortunes}, 400, dir_.File("model/tokenizer")).ok());
  PrepareOptions options = FortuneOptions("m");
  options.tokenizer = "model";
  options.model_dir = dir_.File("model");
  auto summary = PrepareDataset(options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->tokenizer, "hf");  // the folder's tokenizer.model, through our reader
  EXPECT_EQ(summary->vocab_size, 400);
  EXPECT_EQ(summary->files_written.size(), 2u);  // no model trained
  options.model_dir.clear();
  EXPECT_THAT(PrepareDataset(options).status().message(), HasSubstr("needs the model folder"));
}

TEST_F(PrepareDatasetTest, OutputDoesNotDependOnWorkers) {
  PrepareOptions one = FortuneOptions("one");
  PrepareOptions three = FortuneOptions("three");
  three.workers = 3;
  ASSERT_TRUE(PrepareDataset(one).ok());
  ASSERT_TRUE(PrepareDataset(three).ok());
  for (const char* extension : {".bin", ".idx"}) {
    auto a = FileSystem::Default().ReadFile(dir_.File(std::string("one") + extension));
    auto b = FileSystem::Default().ReadFile(dir_.File(std::string("three") + extension));
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(*a == *b) << extension << " differs";
  }
}

TEST_F(PrepareDatasetTest, SentencePiecePreparationTrainsThenEncodes) {
  PrepareOptions options = FortuneOptions("sp");
  options.tokenizer = "sentencepiece";
  options.vocab_size = 1000;
  auto summary = PrepareDataset(options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(FileSystem::Default().Exists(dir_.File("sp.model")));
  EXPECT_FALSE(FileSystem::Default().Exists(dir_.File("sp.model.tmp")));
  EXPECT_EQ(summary->tokenizer, "sentencepiece");
  EXPECT_EQ(summary->vocab_size, 1000);

  auto tokenizer = SentencePieceTokenizer::Load(dir_.File("sp.model"));
  ASSERT_TRUE(tokenizer.ok());
  auto dataset = IndexedDataset::Open(dir_.File("sp"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->vocab_size(), 1000);
  auto fortunes = ReadTextDocuments(kFortunes, {.split_on_percent_lines = true});
  ASSERT_TRUE(fortunes.ok());
  std::vector<int32_t> first = DocumentTokens(**dataset, 0);
  EXPECT_EQ(first.back(), (*tokenizer)->eos_id());
  EXPECT_EQ((*tokenizer)->Decode(first), (*fortunes)[0]);
  // BPE compresses: fewer tokens than the byte tokenizer's one per byte.
  EXPECT_LT(summary->tokens, 24000 / 2);

  // Reusing the trained model gives the same dataset.
  PrepareOptions reuse = FortuneOptions("sp2");
  reuse.tokenizer = "sentencepiece";
  reuse.sp_model = dir_.File("sp.model");
  ASSERT_TRUE(PrepareDataset(reuse).ok());
  EXPECT_EQ(*FileSystem::Default().ReadFile(dir_.File("sp2.bin")), *FileSystem::Default().ReadFile(dir_.File("sp.bin")));
}

TEST_F(PrepareDatasetTest, ErrorsNameTheCulprit) {
  PrepareOptions missing = FortuneOptions("x");
  missing.inputs = {dir_.File("no-such-corpus")};
  EXPECT_THAT(PrepareDataset(missing).status().message(), HasSubstr("no-such-corpus"));

  PrepareOptions bad_tokenizer = FortuneOptions("x");
  bad_tokenizer.tokenizer = "bpe";
  EXPECT_THAT(PrepareDataset(bad_tokenizer).status().message(), HasSubstr("--tokenizer bpe"));

  PrepareOptions bad_model = FortuneOptions("x");
  bad_model.tokenizer = "sentencepiece";
  bad_model.sp_model = dir_.File("absent.model");
  EXPECT_THAT(PrepareDataset(bad_model).status().message(), HasSubstr("absent.model"));
  // Before: sentencepiece's reader threw std::ios_base::failure on a
  // directory, and dsprep aborted (issue 13, finding 7).
  bad_model.sp_model = dir_.File("");
  EXPECT_EQ(PrepareDataset(bad_model).status().message(),
            "sentencepiece model " + dir_.File("") + ": is a directory, not a regular file");
  bad_model.sp_model = dir_.Write("garbage.model", "not a model");
  EXPECT_THAT(PrepareDataset(bad_model).status().message(),
              HasSubstr("cannot load sentencepiece model " + dir_.File("garbage.model") + ": "));

  PrepareOptions empty = FortuneOptions("x");
  empty.inputs = {dir_.Write("empty.txt", "\n")};
  EXPECT_THAT(PrepareDataset(empty).status().message(), HasSubstr("hold no text"));
  EXPECT_FALSE(IndexedDataset::Exists(dir_.File("x")));
  EXPECT_FALSE(FileSystem::Default().Exists(dir_.File("x.bin.tmp")));
}

TEST(DsprepOptionsTest, ParsesEveryFlag) {
  auto command = ParseDsprepArgs({"--input", "a", "--input=b*", "--output", "out", "--tokenizer",
                                  "sentencepiece", "--vocab_size=512", "--sp_model", "m.model",
                                  "--split_on_percent_lines", "--workers", "4"});
  ASSERT_TRUE(command.ok()) << command.status();
  const PrepareOptions& o = command->options;
  EXPECT_EQ(o.inputs, (std::vector<std::string>{"a", "b*"}));
  EXPECT_EQ(o.output_prefix, "out");
  EXPECT_EQ(o.tokenizer, "sentencepiece");
  EXPECT_EQ(o.vocab_size, 512);
  EXPECT_EQ(o.sp_model, "m.model");
  EXPECT_TRUE(o.split_on_percent_lines);
  EXPECT_EQ(o.workers, 4);
  EXPECT_TRUE(ParseDsprepArgs({"--help"})->help);
  EXPECT_TRUE(ParseDsprepArgs({"--version"})->version);
  for (const char* flag : {"--input", "--output", "--tokenizer", "--vocab_size", "--sp_model",
                           "--split_on_percent_lines", "--workers", "--help", "--version"}) {
    EXPECT_THAT(DsprepUsage(), HasSubstr(flag));
  }
}

TEST(DsprepOptionsTest, CountsAreBounded) {
  EXPECT_EQ(ParseDsprepArgs({"--input", "a", "--output", "o", "--vocab_size", "2097153"}).status().message(),
            "--vocab_size '2097153': must be in 0..2097152");
  EXPECT_EQ(ParseDsprepArgs({"--input", "a", "--output", "o", "--workers=100000"}).status().message(),
            "--workers '100000': must be in 1..1024");
  EXPECT_TRUE(ParseDsprepArgs({"--input", "a", "--output", "o", "--workers=1024"}).ok());
}

TEST(DsprepOptionsTest, ErrorsNameTheFlag) {
  EXPECT_THAT(ParseDsprepArgs({"--input", "a", "--ouput", "x"}).status().message(),
              HasSubstr("--ouput"));
  EXPECT_THAT(ParseDsprepArgs({"--input", "a", "--output"}).status().message(),
              HasSubstr("--output needs a value"));
  EXPECT_THAT(ParseDsprepArgs({"--input", "a", "--output", "o", "--workers", "many"})
                  .status().message(),
              HasSubstr("--workers 'many': not an integer"));
  EXPECT_THAT(ParseDsprepArgs({"--output", "o"}).status().message(), HasSubstr("--input"));
  EXPECT_THAT(ParseDsprepArgs({"--input", "a"}).status().message(), HasSubstr("--output"));
  EXPECT_THAT(ParseDsprepArgs({"--input", "a", "--output", "o", "--split_on_percent_lines=1"})
                  .status().message(),
              HasSubstr("--split_on_percent_lines '1': expected true or false"));
}

TEST_F(PrepareDatasetTest, DsprepEndToEndOnFortunes) {
  std::string output;
  int rc = RunCommand(std::string(DSPREP_BINARY) + " --input " + kFortunes + " --output " +
                          dir_.File("e2e") + " --split_on_percent_lines --workers 2",
                      &output);
  ASSERT_EQ(rc, 0) << output;
  EXPECT_THAT(output, HasSubstr("documents"));
  EXPECT_THAT(output, HasSubstr("tokens/s"));
  std::printf("%s", output.c_str());
  auto dataset = IndexedDataset::Open(dir_.File("e2e"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_GT((*dataset)->num_documents(), 100);
  EXPECT_GT((*dataset)->num_tokens(), 10000);
}

TEST_F(PrepareDatasetTest, DsprepReportsBadFlagsAndFiles) {
  std::string output;
  EXPECT_EQ(RunCommand(std::string(DSPREP_BINARY) + " --input x --output y --vocab 5", &output), 2);
  EXPECT_THAT(output, HasSubstr("unknown flag --vocab"));
  output.clear();
  EXPECT_EQ(RunCommand(std::string(DSPREP_BINARY) + " --input " + dir_.File("gone.txt") +
                           " --output " + dir_.File("y"),
                       &output),
            1);
  EXPECT_THAT(output, HasSubstr("gone.txt"));
}

}  // namespace
}  // namespace dslaunch::runtime

#include "runtime/data/prepare_instructions.h"

#include <sys/wait.h>

#include <cstdio>

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/data/run_command_for_test.h"
#include "runtime/data/dsprep_options.h"
#include "runtime/data/instruction_dataset.h"
#include "runtime/data/instruction_samples.h"
#include "runtime/fs/file_system.h"
#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Document {
  std::vector<int32_t> tokens;
  std::vector<int32_t> mask;
};

Document Read(const InstructionDataset& dataset, int64_t d) {
  Document doc{std::vector<int32_t>(dataset.DocumentLength(d)), std::vector<int32_t>(dataset.DocumentLength(d))};
  EXPECT_TRUE(dataset.CopyDocument(d, doc.tokens.size(), doc.tokens.data(), doc.mask.data()).ok());
  return doc;
}

// The byte ids of `text`.
std::vector<int32_t> Bytes(const std::string& text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

int CountOf(const std::vector<int32_t>& v, int32_t x) { return static_cast<int>(std::count(v.begin(), v.end(), x)); }

constexpr char kAlpacaJsonl[] =
    R"({"instruction": "Name a color.", "input": "", "output": "Blue."})"
    "\n"
    R"({"instruction": "Add.", "input": "2, 3", "output": "5"})"
    "\n";

class PrepareInstructionsTest : public ::testing::Test {
 protected:
  InstructionPrepareOptions Options(const std::string& records_file, const std::string& name) const {
    InstructionPrepareOptions options;
    options.records = {records_file};
    options.output_prefix = dir_.File(name);
    options.sequence_length = 1024;
    return options;
  }

  TestTempDir dir_;
};

TEST_F(PrepareInstructionsTest, AlpacaRecordsBecomeTokensAndMasks) {
  auto summary = PrepareInstructionDataset(Options(dir_.Write("a.jsonl", kAlpacaJsonl), "a"));
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->records_read, 2);
  EXPECT_EQ(summary->records_written, 2);
  EXPECT_EQ(summary->label_tokens, 5 + 1 + 1 + 1);  // "Blue." + eos, "5" + eos
  EXPECT_THAT(summary->ToString(), HasSubstr("2 records -> 2 written (0 bad skipped"));
  auto dataset = InstructionDataset::Open(dir_.File("a"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ((*dataset)->num_documents(), 2);
  // Byte tokenizer: no bos; prompt bytes, response bytes, eos.
  std::vector<int32_t> expected = Bytes(AlpacaPrompt("Add.", "2, 3") + "5");
  expected.push_back(ByteTokenizer::kEosId);
  Document second = Read(**dataset, 1);
  EXPECT_EQ(second.tokens, expected);
  std::vector<int32_t> mask(expected.size(), 0);
  mask[mask.size() - 2] = mask[mask.size() - 1] = 1;
  EXPECT_EQ(second.mask, mask);
}

TEST_F(PrepareInstructionsTest, SentencePiecePromptAndResponseAreEncodedApart) {
  // A small model trained on the records' own words.
  const std::string corpus = dir_.Write("corpus.txt", std::string(200, 'x') + "\nName a color. Blue. Add the numbers "
                                                      "below. Response Instruction Input\n");
  ASSERT_TRUE(TrainSentencePieceBpe({corpus}, 300, dir_.File("sp")).ok());
  auto tokenizer = SentencePieceTokenizer::Load(dir_.File("sp.model"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  InstructionPrepareOptions options = Options(dir_.Write("a.jsonl", kAlpacaJsonl), "sp-data");
  options.tokenizer = "sentencepiece";
  options.sp_model = dir_.File("sp.model");
  auto summary = PrepareInstructionDataset(options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  auto dataset = InstructionDataset::Open(dir_.File("sp-data"));
  ASSERT_TRUE(dataset.ok());
  std::vector<int32_t> prompt = (*tokenizer)->Encode(AlpacaPrompt("Name a color.", ""));
  std::vector<int32_t> response = (*tokenizer)->Encode("Blue.");
  std::vector<int32_t> expected = {(*tokenizer)->bos_id()};
  expected.insert(expected.end(), prompt.begin(), prompt.end());
  expected.insert(expected.end(), response.begin(), response.end());
  expected.push_back((*tokenizer)->eos_id());
  Document first = Read(**dataset, 0);
  EXPECT_EQ(first.tokens, expected);
  EXPECT_EQ(CountOf(first.mask, 1), static_cast<int>(response.size()) + 1);
  EXPECT_EQ(first.mask[prompt.size()], 0);      // the prompt's last token
  EXPECT_EQ(first.mask[prompt.size() + 1], 1);  // the response's first
}

TEST_F(PrepareInstructionsTest, BadRecordsAreRefusedWithFileLineAndFieldAndNothingIsWritten) {
  const std::string file = dir_.Write("bad.jsonl", std::string(kAlpacaJsonl) + "\n" +
                                                       R"({"instruction": "x", "outptu": "y"})" + "\n");
  InstructionPrepareOptions options = Options(file, "bad");
  auto refused = PrepareInstructionDataset(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr(file + ":4: bad alpaca record: field 'output': missing"));
  for (const char* suffix : {".bin", ".idx", ".loss_mask.bin", ".loss_mask.idx", ".bin.tmp", ".idx.tmp"}) {
    EXPECT_FALSE(FileSystem::Default().Exists(dir_.File("bad") + suffix)) << suffix;
  }

  const std::string broken = dir_.Write("broken.json", "[\n" + std::string(R"({"instruction": "a", "output": "b"},)") +
                                                           "\n" + R"({"instruction": "a" "output": "b"})" + "\n]\n");
  auto syntax = PrepareInstructionDataset(Options(broken, "broken"));
  EXPECT_THAT(syntax.status().message(), HasSubstr(broken + ":3: bad alpaca record: invalid JSON"));
}

TEST_F(PrepareInstructionsTest, SkippedBadRecordsAreCountedAndQuoted) {
  const std::string file =
      dir_.Write("mixed.json", "[" + std::string(R"({"instruction": "a", "output": "b"},)") + "\n" +
                                   R"({"instruction": "a", "output": 3},)" + "\n" + R"({"instruction": "", "output": "b"},)" +
                                   "\n" + R"({"instruction": "c", "output": "d"}])");
  InstructionPrepareOptions options = Options(file, "mixed");
  options.on_bad_record = BadRecordPolicy::kSkip;
  auto summary = PrepareInstructionDataset(options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->records_read, 4);
  EXPECT_EQ(summary->records_written, 2);
  EXPECT_EQ(summary->bad_records_skipped, 2);
  EXPECT_THAT(summary->skipped_examples,
              ElementsAre(file + ":2: field 'output': expected a string, got the value 3",
                          file + ":3: field 'instruction': is empty"));
  EXPECT_THAT(summary->ToString(), HasSubstr("4 records -> 2 written (2 bad skipped"));

  // Nothing usable: an error, not an empty dataset.
  const std::string none = dir_.Write("none.jsonl", R"({"output": "b"})");
  options = Options(none, "none");
  options.on_bad_record = BadRecordPolicy::kSkip;
  EXPECT_THAT(PrepareInstructionDataset(options).status().message(), HasSubstr("no usable record (1 read, 1 bad"));
}

TEST_F(PrepareInstructionsTest, LongRecordsFollowThePolicy) {
  // Byte tokens: a record of n bytes of prompt+response is n + 1 tokens (eos).
  const std::string file = dir_.Write("long.jsonl", std::string(R"({"prompt": "abc", "response": "de"})") + "\n" +
                                                        R"({"prompt": "abcdefgh", "response": "ijklmn"})" + "\n");
  InstructionPrepareOptions options = Options(file, "long");
  options.format.format = RecordFormat::kPromptResponse;
  options.sequence_length = 8;
  auto refused = PrepareInstructionDataset(options);
  EXPECT_THAT(refused.status().message(),
              HasSubstr(file + ":2: the record has 15 tokens; it needs sequence_length 14, more than 8"));
  EXPECT_FALSE(InstructionDataset::Exists(dir_.File("long")));

  options.on_long_record = LongRecordPolicy::kSkip;
  auto skipped = PrepareInstructionDataset(options);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(skipped->records_written, 1);
  EXPECT_EQ(skipped->long_records_skipped, 1);

  options.on_long_record = LongRecordPolicy::kTruncate;
  auto truncated = PrepareInstructionDataset(options);
  ASSERT_TRUE(truncated.ok()) << truncated.status();
  EXPECT_EQ(truncated->long_records_truncated, 1);
  EXPECT_EQ(truncated->longest_record, 9);
  auto dataset = InstructionDataset::Open(dir_.File("long"));
  ASSERT_TRUE(dataset.ok());
  Document cut = Read(**dataset, 1);
  EXPECT_EQ(cut.tokens, Bytes("abcdefghi"));
  EXPECT_THAT(cut.mask, ElementsAre(0, 0, 0, 0, 0, 0, 0, 0, 1));

  // Truncation that leaves no response is a skip, not a record without labels.
  options.sequence_length = 5;
  auto nothing_left = PrepareInstructionDataset(options);
  ASSERT_TRUE(nothing_left.ok()) << nothing_left.status();
  EXPECT_EQ(nothing_left->long_records_truncated, 0);
  EXPECT_EQ(nothing_left->long_records_skipped, 1);
  EXPECT_THAT(nothing_left->skipped_examples[0], HasSubstr("hold no response"));
}

TEST_F(PrepareInstructionsTest, OutputDoesNotDependOnWorkers) {
  std::string many;
  for (int i = 0; i < 500; ++i) {
    many += "{\"prompt\": \"question " + std::to_string(i) + "\", \"response\": \"answer " +
            std::string(i % 17, 'z') + "\"}\n";
  }
  const std::string file = dir_.Write("many.jsonl", many);
  InstructionPrepareOptions one = Options(file, "one");
  one.format.format = RecordFormat::kPromptResponse;
  InstructionPrepareOptions four = one;
  four.output_prefix = dir_.File("four");
  four.workers = 4;
  ASSERT_TRUE(PrepareInstructionDataset(one).ok());
  ASSERT_TRUE(PrepareInstructionDataset(four).ok());
  for (const char* suffix : {".bin", ".idx", ".loss_mask.bin", ".loss_mask.idx"}) {
    auto a = FileSystem::Default().ReadFile(dir_.File(std::string("one") + suffix));
    auto b = FileSystem::Default().ReadFile(dir_.File(std::string("four") + suffix));
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b) << suffix;
  }
}

TEST_F(PrepareInstructionsTest, ModelTokenizerNeedsAFolderWithOne) {
  InstructionPrepareOptions options = Options(dir_.Write("a.jsonl", kAlpacaJsonl), "m");
  options.tokenizer = "model";
  options.model_dir = dir_.File("no-such-model");
  EXPECT_THAT(PrepareInstructionDataset(options).status().message(), HasSubstr("no-such-model: no such file or folder"));
  ASSERT_TRUE(FileSystem::Default().CreateDirectories(dir_.File("empty-model")).ok());
  options.model_dir = dir_.File("empty-model");
  EXPECT_THAT(PrepareInstructionDataset(options).status().message(),
              HasSubstr("the folder holds no tokenizer.json or tokenizer.model"));
  // A folder with a SentencePiece tokenizer.model (Llama-2 style).
  ASSERT_TRUE(FileSystem::Default().CreateDirectories(dir_.File("sp-model")).ok());
  const std::string corpus = dir_.Write("corpus.txt", "Name a color. Blue. Add five\n");
  ASSERT_TRUE(TrainSentencePieceBpe({corpus}, 280, dir_.File("sp-model/tokenizer")).ok());
  options.model_dir = dir_.File("sp-model");
  auto summary = PrepareInstructionDataset(options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->tokenizer, "hf");  // the folder's tokenizer.model, through our reader
}

TEST_F(PrepareInstructionsTest, DsprepEndToEndOnChatJsonl) {
  const std::string records = dir_.Write(
      "chat.jsonl",
      std::string(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})") +
          "\n" + R"({"messages": [{"role": "user", "content": "hi"}]})" + "\n" +
          R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, )" +
          R"({"role": "assistant", "content": "a\u00e9\ud83d\ude00"}]})" + "\n");
  const std::string chat = dir_.Write("chat.yaml",
                                      "system: {prefix: \"S:\", suffix: \";\"}\n"
                                      "user: {prefix: \"U:\", suffix: \";\"}\n"
                                      "assistant: {prefix: \"A:\", suffix: \".\"}\n");
  std::string output;
  const int rc = RunCommand(std::string(DSPREP_BINARY) + " --format chat --records " + records +
                                " --chat_template " + chat + " --sequence_length 64 --on_bad_record skip --output " +
                                dir_.File("chat"),
                            &output);
  ASSERT_EQ(rc, 0) << output;
  EXPECT_THAT(output, HasSubstr("dsprep: skipped " + records + ":2: field 'messages': has no assistant turn"));
  EXPECT_THAT(output, HasSubstr("3 records -> 2 written (1 bad skipped"));
  auto dataset = InstructionDataset::Open(dir_.File("chat"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ((*dataset)->num_documents(), 2);
  Document first = Read(**dataset, 0);
  std::vector<int32_t> tokens = Bytes("U:hi;A:yo.");
  tokens.push_back(ByteTokenizer::kEosId);
  EXPECT_EQ(first.tokens, tokens);
  EXPECT_THAT(first.mask, ElementsAre(0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1));
  Document second = Read(**dataset, 1);
  tokens = Bytes("S:s;U:q;A:a\xC3\xA9\xF0\x9F\x98\x80.");
  tokens.push_back(ByteTokenizer::kEosId);
  EXPECT_EQ(second.tokens, tokens);
  EXPECT_EQ(CountOf(second.mask, 1), 1 + 2 + 4 + 1 + 1);  // a é 😀 . eos

  // The prepared pair feeds samples: packed, both records in one sample.
  InstructionSamplesOptions sample_options;
  sample_options.sequence_length = 64;
  sample_options.packing = true;
  auto samples = InstructionSamples::Create(dataset->get(), sample_options);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ((*samples)->sample_count(), 1);
}

TEST_F(PrepareInstructionsTest, DsprepRefusesABadRecordWithExitStatusOne) {
  const std::string records = dir_.Write("r.jsonl", R"({"prompt": "p", "response": ""})");
  std::string output;
  EXPECT_EQ(RunCommand(std::string(DSPREP_BINARY) + " --format prompt_response --records " + records +
                           " --sequence_length 16 --output " + dir_.File("r"),
                       &output),
            1);
  EXPECT_THAT(output, HasSubstr(records + ":1: bad prompt_response record: field 'response': is empty"));
  EXPECT_FALSE(FileSystem::Default().Exists(dir_.File("r.idx")));
}

TEST(DsprepInstructionOptionsTest, FlagsOfRecordsMode) {
  TestTempDir dir;
  const std::string chat = dir.Write("t.yaml", "user: {prefix: a}\nassistant: {suffix: b}\n");
  auto command = ParseDsprepArgs({"--format", "chat", "--records", "a.jsonl", "--records", "b/*.json", "--output",
                                  "out", "--sequence_length", "512", "--chat_template", chat, "--tokenizer", "model",
                                  "--model_dir", "llama", "--on_bad_record", "skip", "--on_long_record", "truncate",
                                  "--workers", "3"});
  ASSERT_TRUE(command.ok()) << command.status();
  ASSERT_TRUE(command->instruction);
  const InstructionPrepareOptions& o = command->instruction_options;
  EXPECT_THAT(o.records, ElementsAre("a.jsonl", "b/*.json"));
  EXPECT_EQ(o.output_prefix, "out");
  EXPECT_EQ(o.sequence_length, 512);
  EXPECT_EQ(o.format.format, RecordFormat::kChat);
  EXPECT_EQ(o.format.chat_template.user.prefix, "a");
  EXPECT_EQ(o.format.chat_template.assistant.suffix, "b");
  EXPECT_EQ(o.tokenizer, "model");
  EXPECT_EQ(o.model_dir, "llama");
  EXPECT_EQ(o.on_bad_record, BadRecordPolicy::kSkip);
  EXPECT_EQ(o.on_long_record, LongRecordPolicy::kTruncate);
  EXPECT_EQ(o.workers, 3);

  auto fields = ParseDsprepArgs({"--format", "prompt_response", "--records", "a", "--output", "o",
                                 "--sequence_length", "8", "--prompt_field", "q", "--response_field", "a"});
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(fields->instruction_options.format.prompt_field, "q");
  EXPECT_EQ(fields->instruction_options.format.response_field, "a");

  auto message = [](std::vector<std::string> args) {
    return std::string(ParseDsprepArgs(args).status().message());
  };
  EXPECT_EQ(message({"--format", "alpaca", "--output", "o", "--sequence_length", "8"}),
            "--records is required with --format alpaca|prompt_response|chat");
  EXPECT_THAT(message({"--format", "alpaca", "--records", "a", "--output", "o"}), HasSubstr("--sequence_length is required"));
  EXPECT_EQ(message({"--format", "alpaca", "--records", "a", "--input", "b", "--output", "o", "--sequence_length", "8"}),
            "--input is for --format text (records come with --records)");
  EXPECT_EQ(message({"--format", "chat", "--records", "a", "--output", "o", "--sequence_length", "8"}),
            "--format chat needs --chat_template FILE");
  EXPECT_EQ(message({"--format", "alpaca", "--records", "a", "--output", "o", "--sequence_length", "8",
                     "--chat_template", chat}),
            "--chat_template is for --format chat");
  EXPECT_EQ(message({"--format", "alpaca", "--records", "a", "--output", "o", "--sequence_length", "8",
                     "--prompt_field", "q"}),
            "--prompt_field and --response_field are for --format prompt_response");
  EXPECT_EQ(message({"--input", "a", "--output", "o", "--records", "r"}),
            "--records is for --format alpaca|prompt_response|chat");
  EXPECT_EQ(message({"--input", "a", "--output", "o", "--on_long_record", "skip"}),
            "--on_long_record is for --format alpaca|prompt_response|chat");
  EXPECT_EQ(message({"--format", "alpaca", "--records", "a", "--output", "o", "--sequence_length", "8",
                     "--tokenizer", "sentencepiece"}),
            "--tokenizer sentencepiece with records needs --sp_model (the model's own)");
  EXPECT_THAT(message({"--format", "jinja", "--records", "a", "--output", "o"}), HasSubstr("--format"));
  EXPECT_THAT(message({"--format", "chat", "--records", "a", "--output", "o", "--sequence_length", "8",
                       "--chat_template", dir.File("missing.yaml")}),
              HasSubstr("--chat_template"));
  for (const char* flag : {"--format", "--records", "--sequence_length", "--chat_template", "--prompt_field",
                           "--response_field", "--on_bad_record", "--on_long_record", "--model_dir"}) {
    EXPECT_THAT(DsprepUsage(), HasSubstr(flag));
  }
}

}  // namespace
}  // namespace dslaunch::runtime

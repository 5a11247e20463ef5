#include "runtime/data/instruction_format.h"

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/data/instruction_encoding.h"
#include "runtime/data/json_text.h"
#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Bytes with a bos (257), so masks can be checked by hand: every character
// is one token.
class BosByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> Encode(absl::string_view text) const override { return bytes_.Encode(text); }
  std::string Decode(const std::vector<int32_t>& ids) const override { return bytes_.Decode(ids); }
  int vocab_size() const override { return 258; }
  int32_t eos_id() const override { return ByteTokenizer::kEosId; }
  int32_t bos_id() const override { return 257; }
  std::string name() const override { return "bos-byte"; }

 private:
  ByteTokenizer bytes_;
};

YAML::Node Json(const std::string& text) {
  auto value = ParseJsonValue(text);
  EXPECT_TRUE(value.ok()) << value.status();
  return value.ok() ? *value : YAML::Node();
}

std::vector<TextSegment> Render(const std::string& json, const RecordFormatOptions& options) {
  auto segments = RenderRecord(Json(json), options);
  EXPECT_TRUE(segments.ok()) << segments.status();
  return segments.ok() ? *segments : std::vector<TextSegment>{};
}

std::string RenderError(const std::string& json, const RecordFormatOptions& options) {
  auto segments = RenderRecord(Json(json), options);
  EXPECT_FALSE(segments.ok());
  return std::string(segments.status().message());
}

RecordFormatOptions Llama3Chat() {
  RecordFormatOptions options;
  options.format = RecordFormat::kChat;
  options.chat_template.system = RoleTemplate{"<|start_header_id|>system<|end_header_id|>\n\n", "<|eot_id|>"};
  options.chat_template.user = {"<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|>"};
  options.chat_template.assistant = {"<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"};
  return options;
}

TEST(InstructionFormatTest, AlpacaPromptsAreStanfordsText) {
  EXPECT_EQ(AlpacaPrompt("Add the numbers.", "2, 3"),
            "Below is an instruction that describes a task, paired with an input that provides further context. "
            "Write a response that appropriately completes the request.\n\n"
            "### Instruction:\nAdd the numbers.\n\n### Input:\n2, 3\n\n### Response:");
  EXPECT_EQ(AlpacaPrompt("Name a color.", ""),
            "Below is an instruction that describes a task. Write a response that appropriately completes the "
            "request.\n\n### Instruction:\nName a color.\n\n### Response:");
}

TEST(InstructionFormatTest, AlpacaRecordsPickTheVariantByInput) {
  RecordFormatOptions alpaca;
  for (const char* no_input : {R"({"instruction": "Name a color.", "output": "Blue."})",
                               R"({"instruction": "Name a color.", "input": "", "output": "Blue."})",
                               R"({"instruction": "Name a color.", "input": null, "output": "Blue."})"}) {
    std::vector<TextSegment> segments = Render(no_input, alpaca);
    ASSERT_EQ(segments.size(), 2u) << no_input;
    EXPECT_EQ(segments[0].text, AlpacaPrompt("Name a color.", ""));
    EXPECT_FALSE(segments[0].trained);
    EXPECT_EQ(segments[1].text, "Blue.");
    EXPECT_TRUE(segments[1].trained);
  }
  std::vector<TextSegment> with_input =
      Render(R"({"instruction": "Add.", "input": "2, 3", "output": "5"})", alpaca);
  ASSERT_EQ(with_input.size(), 2u);
  EXPECT_EQ(with_input[0].text, AlpacaPrompt("Add.", "2, 3"));
}

TEST(InstructionFormatTest, PromptResponseFieldsAreConfigurable) {
  RecordFormatOptions options;
  options.format = RecordFormat::kPromptResponse;
  options.prompt_field = "question";
  options.response_field = "answer";
  std::vector<TextSegment> segments = Render(R"({"question": "Q?", "answer": "A.", "extra": 1})", options);
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[0].text, "Q?");
  EXPECT_EQ(segments[1].text, "A.");
  EXPECT_THAT(RenderError(R"({"prompt": "Q?", "response": "A."})", options), HasSubstr("field 'question': missing"));
}

TEST(InstructionFormatTest, ChatTrainsOnlyAssistantContentAndSuffix) {
  std::vector<TextSegment> segments = Render(
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                       {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"},
                       {"role": "assistant", "content": "Bye."}]})",
      Llama3Chat());
  std::vector<std::string> texts;
  std::vector<bool> trained, templates;
  for (const TextSegment& s : segments) {
    texts.push_back(s.text);
    trained.push_back(s.trained);
    templates.push_back(s.template_text);
  }
  EXPECT_THAT(texts, ElementsAre("<|start_header_id|>system<|end_header_id|>\n\n", "Be brief.", "<|eot_id|>",
                                 "<|start_header_id|>user<|end_header_id|>\n\n", "Hi", "<|eot_id|>",
                                 "<|start_header_id|>assistant<|end_header_id|>\n\n", "Hello.", "<|eot_id|>",
                                 "<|start_header_id|>user<|end_header_id|>\n\n", "Bye", "<|eot_id|>",
                                 "<|start_header_id|>assistant<|end_header_id|>\n\n", "Bye.", "<|eot_id|>"));
  EXPECT_THAT(trained, ElementsAre(false, false, false, false, false, false, false, true, true, false, false, false,
                                   false, true, true));
  EXPECT_THAT(templates, ElementsAre(true, false, true, true, false, true, true, false, true, true, false, true,
                                     true, false, true));
}

TEST(InstructionFormatTest, BadRecordsNameTheField) {
  RecordFormatOptions alpaca;
  EXPECT_EQ(RenderError(R"({"instruction": "x"})", alpaca), "field 'output': missing");
  EXPECT_EQ(RenderError(R"({"instruction": "x", "output": ""})", alpaca), "field 'output': is empty");
  EXPECT_EQ(RenderError(R"({"instruction": "x", "output": 5})", alpaca),
            "field 'output': expected a string, got the value 5");
  EXPECT_EQ(RenderError(R"({"instruction": ["x"], "output": "y"})", alpaca),
            "field 'instruction': expected a string, got a list");
  EXPECT_EQ(RenderError(R"({"instruction": "x", "input": false, "output": "y"})", alpaca),
            "field 'input': expected a string, got the value false");
  EXPECT_EQ(RenderError(R"(["instruction"])", alpaca), "expected a JSON object, got a list");

  RecordFormatOptions chat = Llama3Chat();
  EXPECT_EQ(RenderError(R"({"messages": "hi"})", chat),
            "field 'messages': expected a list of {role, content}, got a string");
  EXPECT_EQ(RenderError(R"({"messages": [{"role": "user", "content": "hi"}]})", chat),
            "field 'messages': has no assistant turn (nothing to train on)");
  EXPECT_EQ(RenderError(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}]})", chat),
            "field 'messages[1].role': 'bot' is not a role (expected system, user or assistant)");
  EXPECT_EQ(RenderError(R"({"messages": [{"role": "user"}, {"role": "assistant", "content": "x"}]})", chat),
            "field 'messages[0].content': missing");
  EXPECT_EQ(RenderError(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": ""}]})",
                        chat),
            "field 'messages[1].content': is empty");
  chat.chat_template.system.reset();
  EXPECT_EQ(RenderError(R"({"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]})",
                        chat),
            "field 'messages[0].role': 'system', but the chat template has no system role");
}

TEST(InstructionFormatTest, ChatTemplateFilesAreReadStrictly) {
  TestTempDir dir;
  auto chat = ReadChatTemplateFile(dir.Write("t.yaml",
                                             "user: {prefix: \"[INST] \", suffix: \" [/INST]\"}\n"
                                             "assistant: {suffix: \"</s>\"}\n"));
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_FALSE(chat->system.has_value());
  EXPECT_EQ(chat->user.prefix, "[INST] ");
  EXPECT_EQ(chat->user.suffix, " [/INST]");
  EXPECT_EQ(chat->assistant.prefix, "");
  EXPECT_EQ(chat->assistant.suffix, "</s>");
  EXPECT_THAT(ReadChatTemplateFile(dir.Write("j.yaml", "\"{% for message in messages %}\"")).status().message(),
              HasSubstr("Jinja chat templates are not interpreted"));
  EXPECT_THAT(ReadChatTemplateFile(dir.Write("u.yaml", "user: {prefix: a}\n")).status().message(),
              HasSubstr("key 'assistant' is missing"));
  EXPECT_THAT(ReadChatTemplateFile(dir.Write("k.yaml", "user: {prefx: a}\nassistant: {}\n")).status().message(),
              HasSubstr("key 'user.prefx' is unknown"));
  EXPECT_THAT(ReadChatTemplateFile(dir.Write("r.yaml", "tool: {}\n")).status().message(),
              HasSubstr("key 'tool' is unknown"));
}

TEST(InstructionEncodingTest, MasksCoverBosAndPromptButNotResponseAndEos) {
  BosByteTokenizer tokenizer;
  EncodedRecord record = EncodeRecord(tokenizer, {{"Q:", false}, {"ok", true}});
  EXPECT_THAT(record.tokens, ElementsAre(257, 'Q', ':', 'o', 'k', 256));
  EXPECT_THAT(record.loss_mask, ElementsAre(0, 0, 0, 1, 1, 1));

  ByteTokenizer no_bos;
  EncodedRecord without = EncodeRecord(no_bos, {{"Q", false}, {"a", true}, {"<e>", true, true}});
  EXPECT_THAT(without.tokens, ElementsAre('Q', 'a', '<', 'e', '>', 256));
  EXPECT_THAT(without.loss_mask, ElementsAre(0, 1, 1, 1, 1, 1));
}

TEST(InstructionEncodingTest, ChatRecordMaskByHand) {
  RecordFormatOptions options;
  options.format = RecordFormat::kChat;
  options.chat_template.user = {"U:", ";"};
  options.chat_template.assistant = {"A:", "."};
  BosByteTokenizer tokenizer;
  EncodedRecord record = EncodeRecord(
      tokenizer, Render(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})",
                        options));
  // bos U : h i ; A : y o . eos
  EXPECT_THAT(record.tokens, ElementsAre(257, 'U', ':', 'h', 'i', ';', 'A', ':', 'y', 'o', '.', 256));
  EXPECT_THAT(record.loss_mask, ElementsAre(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1));
}

}  // namespace
}  // namespace dslaunch::runtime

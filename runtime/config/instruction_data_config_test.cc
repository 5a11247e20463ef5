// LoadJobConfig: the instruction-data keys of `data` (format, records,
// fields, chat template, packing, policies) and their checks.

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/config/config_loader.h"
#include "runtime/config/config_test_util.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class InstructionDataConfigTest : public ConfigFileTest {
 protected:
  // A llama job from a Hugging Face folder with `data` as given.
  absl::StatusOr<JobConfig> LoadData(const std::string& data) {
    const std::string path = Write("job/train.cfg", "model: {type: llama, from: hf/llama, sequence_length: 512}\n" +
                                                        data + "train: {steps: 1}\nds_config: {train_batch_size: 1}\n");
    return LoadJobConfig(path, {}, WorldShape{1});
  }
};

TEST_F(InstructionDataConfigTest, AChatJobReadsEveryKey) {
  auto job = LoadData(R"(data:
  format: chat
  prepared: data/chat
  records: [chat/a.jsonl, /abs/b.json]
  tokenizer: model
  packing: true
  on_bad_record: skip
  on_long_record: truncate
  chat_template:
    system: {prefix: "<|start_header_id|>system<|end_header_id|>\n\n", suffix: "<|eot_id|>"}
    user: {prefix: "<|start_header_id|>user<|end_header_id|>\n\n", suffix: "<|eot_id|>"}
    assistant: {prefix: "<|start_header_id|>assistant<|end_header_id|>\n\n", suffix: "<|eot_id|>"}
)");
  ASSERT_TRUE(job.ok()) << job.status();
  const DataConfig& data = job->data;
  EXPECT_TRUE(data.instruction());
  EXPECT_EQ(data.format, "chat");
  EXPECT_EQ(data.prepared, dir_ + "/job/data/chat");
  EXPECT_THAT(data.records, ElementsAre(dir_ + "/job/chat/a.jsonl", "/abs/b.json"));
  EXPECT_EQ(data.tokenizer, "model");
  EXPECT_TRUE(data.packing);
  EXPECT_EQ(data.on_bad_record, "skip");
  EXPECT_EQ(data.on_long_record, "truncate");
  EXPECT_TRUE(data.chat_has_system);
  EXPECT_EQ(data.chat_system.prefix, "<|start_header_id|>system<|end_header_id|>\n\n");
  EXPECT_EQ(data.chat_user.suffix, "<|eot_id|>");
  EXPECT_EQ(data.chat_assistant.prefix, "<|start_header_id|>assistant<|end_header_id|>\n\n");

  auto no_system = LoadData(R"(data:
  format: chat
  prepared: p
  records: [r.jsonl]
  chat_template: {user: {prefix: "[INST] ", suffix: " [/INST]"}, assistant: {suffix: "</s>"}}
)");
  ASSERT_TRUE(no_system.ok()) << no_system.status();
  EXPECT_FALSE(no_system->data.chat_has_system);
  EXPECT_EQ(no_system->data.chat_assistant.prefix, "");
}

TEST_F(InstructionDataConfigTest, DescribeReadsBack) {
  // A gpt model: what --describe writes for model.from jobs (layers: 0, ...)
  // does not read back, which is not this section's doing.
  const std::string path = Write("job/chat.cfg", R"(model: {layers: 1, heads: 1, width: 8, sequence_length: 8}
data:
  format: chat
  prepared: p
  records: [r.jsonl]
  packing: true
  on_long_record: skip
  chat_template:
    system: {prefix: "S\n\n"}
    user: {prefix: "<|u|>", suffix: "<|e|>"}
    assistant: {prefix: "<|a|>\n", suffix: "<|e|>"}
train: {steps: 1}
ds_config: {train_batch_size: 1}
)");
  auto job = LoadJobConfig(path, {}, WorldShape{1});
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string described = DescribeJobConfig(*job);
  auto again = LoadJobConfig(Write("described.cfg", described), {}, WorldShape{1});
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << described;
  again->path = job->path;
  EXPECT_EQ(DescribeJobConfig(*again), described);
  EXPECT_TRUE(again->data.chat_has_system);
  EXPECT_EQ(again->data.chat_system.prefix, "S\n\n");
  EXPECT_EQ(again->data.chat_assistant.prefix, "<|a|>\n");
}

TEST_F(InstructionDataConfigTest, DefaultsAreTextAndRefusal) {
  auto job = LoadData("data: {prepared: p, format: alpaca, records: [alpaca_data.json]}\n");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->data.tokenizer, "byte");
  EXPECT_FALSE(job->data.packing);
  EXPECT_EQ(job->data.on_bad_record, "refuse");
  EXPECT_EQ(job->data.on_long_record, "refuse");
  EXPECT_EQ(job->data.prompt_field, "prompt");
  EXPECT_EQ(job->data.response_field, "response");
  auto text = LoadData("data: {prepared: p}\n");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->data.format, "text");
  EXPECT_FALSE(text->data.instruction());
}

TEST_F(InstructionDataConfigTest, KeysOfTheOtherModeAreRefusedByName) {
  EXPECT_THAT(ProblemLines(LoadData("data: {prepared: p, records: [r.jsonl], packing: true}\n")),
              ElementsAre(HasSubstr("data.records: is for instruction records (data.format alpaca, prompt_response "
                                    "or chat), not data.format text"),
                          HasSubstr("data.packing: is for instruction records")));
  EXPECT_THAT(ProblemLines(LoadData(
                  "data: {format: alpaca, text_files: [a.txt], split_on_percent_lines: true, prompt_field: q}\n")),
              ElementsAre(HasSubstr("data.text_files: is for data.format text; data.format alpaca reads data.records"),
                          HasSubstr("data.prepared: required with data.format alpaca"),
                          HasSubstr("data.split_on_percent_lines: is for text files, not data.format alpaca"),
                          HasSubstr("data.prompt_field: is for data.format prompt_response, not alpaca")));
  EXPECT_THAT(ProblemLines(LoadData("data: {format: alpaca, prepared: p, tokenizer: sentencepiece, "
                                    "tokenizer_vocab_size: 100}\n")),
              ElementsAre(HasSubstr("data.tokenizer: sentencepiece trains a new vocabulary"),
                          HasSubstr("data.tokenizer_vocab_size: is for a trained sentencepiece tokenizer")));
  EXPECT_THAT(ProblemLines(LoadData("data: {format: prompt_response, prepared: p, chat_template: {user: {prefix: u}}}\n")),
              ElementsAre(HasSubstr("data.chat_template: is for data.format chat, not prompt_response")));
}

TEST_F(InstructionDataConfigTest, ChatNeedsExplicitRolesAndRefusesJinja) {
  EXPECT_THAT(ProblemLines(LoadData("data: {format: chat, prepared: p, chat_template: {user: {prefix: u}}}\n")),
              ElementsAre(HasSubstr("data.chat_template.assistant: required with data.format chat")));
  auto jinja = LoadData(
      "data:\n  format: chat\n  prepared: p\n  chat_template: \"{% for message in messages %}{{ message['content'] "
      "}}{% endfor %}\"\n");
  std::vector<std::string> lines = ProblemLines(jinja);
  ASSERT_EQ(lines.size(), 2u) << jinja.status();
  EXPECT_THAT(lines[0], HasSubstr("train.cfg:5: data.chat_template: expected a mapping"));
  EXPECT_THAT(lines[1], HasSubstr("data.chat_template: Jinja chat templates (tokenizer_config.json's chat_template) "
                                  "are not interpreted"));
  EXPECT_THAT(ProblemLines(LoadData("data:\n  format: chat\n  prepared: p\n  chat_template:\n    jinja: x\n"
                                    "    user: {}\n    assistant: {}\n")),
              ElementsAre(HasSubstr("train.cfg:6: data.chat_template.jinja: Jinja chat templates")));
  EXPECT_THAT(ProblemLines(LoadData("data: {format: chat, prepared: p, chat_template: {user: {prefix: u}, "
                                    "assistant: {}, tool: {}}}\n")),
              ElementsAre(HasSubstr("unknown key 'data.chat_template.tool' (valid keys of data.chat_template: "
                                    "system, user, assistant)")));
}

TEST_F(InstructionDataConfigTest, ValuesAreChecked) {
  EXPECT_THAT(ProblemLines(LoadData("data: {format: alpaca, prepared: p, on_long_record: cut, on_bad_record: warn}\n")),
              ElementsAre(HasSubstr("data.on_long_record: 'cut' is not one of refuse, skip, truncate"),
                          HasSubstr("data.on_bad_record: 'warn' is not one of refuse, skip")));
  EXPECT_THAT(ProblemLines(LoadData("data: {format: sharegpt, prepared: p}\n")),
              ElementsAre(HasSubstr("data.format: 'sharegpt'")));
  // The model's tokenizer needs a model folder.
  const std::string path = Write("job/gpt.cfg",
                                 "model: {layers: 1, heads: 1, width: 8, sequence_length: 8}\n"
                                 "data: {prepared: p, tokenizer: model}\ntrain: {steps: 1}\n"
                                 "ds_config: {train_batch_size: 1}\n");
  EXPECT_THAT(ProblemLines(LoadJobConfig(path, {}, WorldShape{1})),
              ElementsAre(HasSubstr("data.tokenizer: model needs model.from")));
}

}  // namespace
}  // namespace dslaunch::runtime

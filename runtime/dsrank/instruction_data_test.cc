#include "runtime/dsrank/instruction_data.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/config/config_loader.h"
#include "runtime/config/config_test_util.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;

class InstructionDataTest : public ConfigFileTest {};

TEST_F(InstructionDataTest, JobKeysBecomeThePreparationAndSampleOptions) {
  const std::string path = Write("job/train.cfg", R"(model: {type: llama, from: hf/llama, sequence_length: 256}
data:
  format: chat
  prepared: data/chat
  records: [chat.jsonl]
  tokenizer: model
  packing: true
  on_bad_record: skip
  on_long_record: truncate
  chat_template:
    user: {prefix: "U:", suffix: ";"}
    assistant: {prefix: "A:", suffix: "."}
train: {steps: 1, seed: 99}
ds_config: {train_batch_size: 1}
)");
  auto job = LoadJobConfig(path, {}, WorldShape{1});
  ASSERT_TRUE(job.ok()) << job.status();
  auto prepare = InstructionPrepareOptionsFor(*job);
  ASSERT_TRUE(prepare.ok()) << prepare.status();
  EXPECT_THAT(prepare->records, ElementsAre(dir_ + "/job/chat.jsonl"));
  EXPECT_EQ(prepare->output_prefix, dir_ + "/job/data/chat");
  EXPECT_EQ(prepare->format.format, RecordFormat::kChat);
  EXPECT_FALSE(prepare->format.chat_template.system.has_value());
  EXPECT_EQ(prepare->format.chat_template.user.prefix, "U:");
  EXPECT_EQ(prepare->format.chat_template.assistant.suffix, ".");
  EXPECT_EQ(prepare->tokenizer, "model");
  EXPECT_EQ(prepare->model_dir, dir_ + "/job/hf/llama");
  EXPECT_EQ(prepare->sequence_length, 256);
  EXPECT_EQ(prepare->on_bad_record, BadRecordPolicy::kSkip);
  EXPECT_EQ(prepare->on_long_record, LongRecordPolicy::kTruncate);

  auto samples = InstructionSamplesOptionsFor(*job, /*pad_id=*/2, 10, 20);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(samples->sequence_length, 256);
  EXPECT_TRUE(samples->packing);
  EXPECT_EQ(samples->on_long_record, LongRecordPolicy::kTruncate);
  EXPECT_EQ(samples->pad_id, 2);
  EXPECT_EQ(samples->seed, 99u);
  EXPECT_EQ(samples->first_document, 10);
  EXPECT_EQ(samples->end_document, 20);

  JobConfig bad = *job;
  bad.data.on_long_record = "cut";
  EXPECT_EQ(InstructionSamplesOptionsFor(bad, 0).status().message(),
            path + ": data.on_long_record: long-record policy 'cut' is unknown (expected refuse, skip or truncate)");
}

}  // namespace
}  // namespace dslaunch::runtime

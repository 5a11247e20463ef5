#include "runtime/dsrank/instruction_data.h"

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace {

// The job file validated these (job_config_schema.cc); an error here names
// the key all the same.
template <typename T>
absl::StatusOr<T> Named(absl::StatusOr<T> value, const JobConfig& job, absl::string_view key) {
  if (!value.ok()) return absl::InvalidArgumentError(absl::StrCat(job.path, ": ", key, ": ", value.status().message()));
  return value;
}

}  // namespace

absl::StatusOr<InstructionPrepareOptions> InstructionPrepareOptionsFor(const JobConfig& job) {
  const DataConfig& data = job.data;
  InstructionPrepareOptions options;
  absl::StatusOr<RecordFormat> format = Named(ParseRecordFormat(data.format), job, "data.format");
  absl::StatusOr<BadRecordPolicy> bad = Named(ParseBadRecordPolicy(data.on_bad_record), job, "data.on_bad_record");
  absl::StatusOr<LongRecordPolicy> long_policy =
      Named(ParseLongRecordPolicy(data.on_long_record), job, "data.on_long_record");
  if (!format.ok()) return format.status();
  if (!bad.ok()) return bad.status();
  if (!long_policy.ok()) return long_policy.status();
  options.records = data.records;
  options.output_prefix = data.prepared;
  options.format.format = *format;
  options.format.prompt_field = data.prompt_field;
  options.format.response_field = data.response_field;
  if (data.chat_has_system) options.format.chat_template.system = RoleTemplate{data.chat_system.prefix, data.chat_system.suffix};
  options.format.chat_template.user = {data.chat_user.prefix, data.chat_user.suffix};
  options.format.chat_template.assistant = {data.chat_assistant.prefix, data.chat_assistant.suffix};
  options.tokenizer = data.tokenizer;
  options.model_dir = job.model.from;
  options.sequence_length = job.model.sequence_length;
  options.on_bad_record = *bad;
  options.on_long_record = *long_policy;
  return options;
}

absl::StatusOr<InstructionSamplesOptions> InstructionSamplesOptionsFor(const JobConfig& job, int32_t pad_id,
                                                                      int64_t first_document, int64_t end_document) {
  absl::StatusOr<LongRecordPolicy> long_policy =
      Named(ParseLongRecordPolicy(job.data.on_long_record), job, "data.on_long_record");
  if (!long_policy.ok()) return long_policy.status();
  InstructionSamplesOptions options;
  options.sequence_length = job.model.sequence_length;
  options.packing = job.data.packing;
  options.on_long_record = *long_policy;
  options.pad_id = pad_id;
  options.seed = job.train.seed;
  options.first_document = first_document;
  options.end_document = end_document;
  return options;
}

}  // namespace dslaunch::runtime

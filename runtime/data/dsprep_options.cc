#include "runtime/data/dsprep_options.h"

#include "absl/strings/str_cat.h"
#include "common/flag_table.h"

namespace dslaunch::runtime {
namespace {

// Upper bounds (docs/inputs.md): the vocabulary a job file may ask for
// (data.tokenizer_vocab_size), threads well past any machine's cores, and
// the job file's model.sequence_length.
constexpr int kMaxVocabSize = 1 << 21;
constexpr int kMaxWorkers = 1024;
constexpr int kMaxSequenceLength = 1 << 20;

// The flags' values before they are copied into the options' ints and enums.
struct DsprepFlags {
  PrepareOptions options;
  int64_t vocab_size = 0;
  int64_t workers = 1;
  std::string format = "text";
  std::vector<std::string> records;
  std::string model_dir;
  std::string prompt_field = "prompt";
  std::string response_field = "response";
  std::string chat_template;
  int64_t sequence_length = 0;
  std::string on_bad_record = "refuse";
  std::string on_long_record = "refuse";
};

FlagTable DsprepFlagTable(DsprepFlags& flags) {
  FlagTable table("dsprep",
                  "dsprep --input FILE_OR_GLOB [--input ...] --output PREFIX [flags]\n"
                  "       dsprep --format alpaca|prompt_response|chat --records FILE_OR_GLOB [--records ...]\n"
                  "              --output PREFIX --sequence_length N [flags]\n"
                  "Tokenizes text files into an indexed dataset (PREFIX.bin, PREFIX.idx), or instruction\n"
                  "records (JSON arrays or JSON Lines) into one with its loss mask (also\n"
                  "PREFIX.loss_mask.bin, PREFIX.loss_mask.idx).");
  table.String("--format", &flags.format, "", "what the inputs hold",
               {"text", "alpaca", "prompt_response", "chat"})
      .Repeated("--input", &flags.options.inputs, "FILE_OR_GLOB", "text: text file, directory or glob")
      .Repeated("--records", &flags.records, "FILE_OR_GLOB",
                "alpaca|prompt_response|chat: JSON or JSON Lines records file, directory or glob")
      .String("--output", &flags.options.output_prefix, "PREFIX",
              "writes PREFIX.bin and PREFIX.idx (and PREFIX.model, or PREFIX.loss_mask.*)")
      .String("--tokenizer", &flags.options.tokenizer, "", "how text becomes tokens (model: --model_dir's own)",
              {"byte", "sentencepiece", "model"})
      .Int("--vocab_size", &flags.vocab_size, "N", "text: sentencepiece vocabulary to train (0: 8000)",
           {0, kMaxVocabSize})
      .String("--sp_model", &flags.options.sp_model, "PATH",
              "sentencepiece model to use (text: instead of training one)")
      .String("--model_dir", &flags.model_dir, "DIR",
              "tokenizer model: a Hugging Face model folder (tokenizer.json or tokenizer.model)")
      .Bool("--split_on_percent_lines", &flags.options.split_on_percent_lines,
            "text, fortune files: documents end at lines of just %")
      .Int("--sequence_length", &flags.sequence_length, "N",
           "records (required): the model's sequence length; longer records follow --on_long_record", {1, kMaxSequenceLength})
      .String("--prompt_field", &flags.prompt_field, "NAME", "prompt_response: the prompt's field")
      .String("--response_field", &flags.response_field, "NAME", "prompt_response: the response's field")
      .String("--chat_template", &flags.chat_template, "FILE",
              "chat: YAML file of system/user/assistant {prefix, suffix} (Jinja is not interpreted)")
      .String("--on_bad_record", &flags.on_bad_record, "", "records: a malformed record stops (refuse) or is left out",
              {"refuse", "skip"})
      .String("--on_long_record", &flags.on_long_record, "",
              "records: a record longer than --sequence_length stops, is left out, or is cut",
              {"refuse", "skip", "truncate"})
      .Int("--workers", &flags.workers, "N", "tokenizing threads", {1, kMaxWorkers});
  return table;
}

absl::Status OnlyFor(bool misplaced, absl::string_view flag, absl::string_view mode) {
  if (!misplaced) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(flag, " is for ", mode));
}

absl::StatusOr<DsprepCommand> InstructionCommand(const DsprepFlags& flags) {
  const std::string records_mode = "--format alpaca|prompt_response|chat";
  for (const absl::Status& status :
       {OnlyFor(!flags.options.inputs.empty(), "--input", "--format text (records come with --records)"),
        OnlyFor(flags.vocab_size != 0, "--vocab_size", "--format text (records need the model's tokenizer)"),
        OnlyFor(flags.options.split_on_percent_lines, "--split_on_percent_lines", "--format text")}) {
    if (!status.ok()) return status;
  }
  DsprepCommand command;
  command.instruction = true;
  InstructionPrepareOptions& o = command.instruction_options;
  o.records = flags.records;
  o.output_prefix = flags.options.output_prefix;
  o.tokenizer = flags.options.tokenizer;
  o.sp_model = flags.options.sp_model;
  o.model_dir = flags.model_dir;
  o.sequence_length = static_cast<int>(flags.sequence_length);
  o.workers = static_cast<int>(flags.workers);
  auto format = ParseRecordFormat(flags.format);
  auto bad = ParseBadRecordPolicy(flags.on_bad_record);
  auto long_policy = ParseLongRecordPolicy(flags.on_long_record);
  if (!format.ok()) return format.status();
  if (!bad.ok()) return bad.status();
  if (!long_policy.ok()) return long_policy.status();
  o.format.format = *format;
  o.format.prompt_field = flags.prompt_field;
  o.format.response_field = flags.response_field;
  o.on_bad_record = *bad;
  o.on_long_record = *long_policy;
  if (o.records.empty()) return absl::InvalidArgumentError(absl::StrCat("--records is required with ", records_mode));
  if (o.output_prefix.empty()) return absl::InvalidArgumentError("--output is required");
  if (o.sequence_length == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sequence_length is required with ", records_mode, " (records longer than it: --on_long_record)"));
  }
  if (o.tokenizer == "sentencepiece" && o.sp_model.empty()) {
    return absl::InvalidArgumentError("--tokenizer sentencepiece with records needs --sp_model (the model's own)");
  }
  if (o.tokenizer == "model" && o.model_dir.empty()) {
    return absl::InvalidArgumentError("--tokenizer model needs --model_dir");
  }
  const DsprepFlags defaults;
  if (*format != RecordFormat::kPromptResponse &&
      (o.format.prompt_field != defaults.prompt_field || o.format.response_field != defaults.response_field)) {
    return absl::InvalidArgumentError("--prompt_field and --response_field are for --format prompt_response");
  }
  if (*format == RecordFormat::kChat) {
    if (flags.chat_template.empty()) return absl::InvalidArgumentError("--format chat needs --chat_template FILE");
    absl::StatusOr<ChatTemplate> chat = ReadChatTemplateFile(flags.chat_template);
    if (!chat.ok()) return absl::InvalidArgumentError(absl::StrCat("--chat_template ", chat.status().message()));
    o.format.chat_template = *chat;
  } else if (!flags.chat_template.empty()) {
    return absl::InvalidArgumentError("--chat_template is for --format chat");
  }
  return command;
}

}  // namespace

absl::StatusOr<DsprepCommand> ParseDsprepArgs(const std::vector<std::string>& args) {
  DsprepCommand command;
  DsprepFlags flags;
  FlagTable table = DsprepFlagTable(flags);
  if (absl::Status parsed = table.Parse(args); !parsed.ok()) return parsed;
  command.help = table.help_requested();
  command.version = table.version_requested();
  if (command.help || command.version) return command;
  if (!table.positionals().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", table.positionals().front(), "\" (flags start with --)"));
  }
  if (flags.format != "text") return InstructionCommand(flags);
  const DsprepFlags defaults;
  const std::string records_mode = "--format alpaca|prompt_response|chat";
  for (const absl::Status& status :
       {OnlyFor(!flags.records.empty(), "--records", records_mode),
        OnlyFor(flags.sequence_length != 0, "--sequence_length", records_mode),
        OnlyFor(flags.on_bad_record != defaults.on_bad_record, "--on_bad_record", records_mode),
        OnlyFor(flags.on_long_record != defaults.on_long_record, "--on_long_record", records_mode),
        OnlyFor(flags.prompt_field != defaults.prompt_field, "--prompt_field", "--format prompt_response"),
        OnlyFor(flags.response_field != defaults.response_field, "--response_field", "--format prompt_response"),
        OnlyFor(!flags.chat_template.empty(), "--chat_template", "--format chat")}) {
    if (!status.ok()) return status;
  }
  command.options = flags.options;
  command.options.vocab_size = static_cast<int>(flags.vocab_size);
  command.options.workers = static_cast<int>(flags.workers);
  command.options.model_dir = flags.model_dir;
  if (command.options.inputs.empty()) return absl::InvalidArgumentError("--input is required");
  if (command.options.output_prefix.empty()) return absl::InvalidArgumentError("--output is required");
  if (command.options.tokenizer == "model" && command.options.model_dir.empty()) {
    return absl::InvalidArgumentError("--tokenizer model needs --model_dir");
  }
  return command;
}

std::string DsprepUsage() {
  DsprepFlags flags;
  return DsprepFlagTable(flags).Help();
}

std::string DsprepVersion() {
  DsprepFlags flags;
  return DsprepFlagTable(flags).Version();
}

}  // namespace dslaunch::runtime

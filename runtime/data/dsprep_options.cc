#include "runtime/data/dsprep_options.h"

#include "absl/strings/str_cat.h"
#include "common/flag_table.h"

namespace dslaunch::runtime {
namespace {

// Upper bounds (docs/inputs.md): the vocabulary a job file may ask for
// (data.tokenizer_vocab_size), and threads well past any machine's cores.
constexpr int kMaxVocabSize = 1 << 21;
constexpr int kMaxWorkers = 1024;

// The flags' values before they are copied into PrepareOptions' ints.
struct DsprepFlags {
  PrepareOptions options;
  int64_t vocab_size = 0;
  int64_t workers = 1;
};

FlagTable DsprepFlagTable(DsprepFlags& flags) {
  FlagTable table("dsprep", "dsprep --input FILE_OR_GLOB [--input ...] --output PREFIX [flags]\n"
                            "Tokenizes text files into an indexed dataset (PREFIX.bin, PREFIX.idx).");
  table.Repeated("--input", &flags.options.inputs, "FILE_OR_GLOB", "text file, directory or glob")
      .String("--output", &flags.options.output_prefix, "PREFIX",
              "writes PREFIX.bin and PREFIX.idx (and PREFIX.model)")
      .String("--tokenizer", &flags.options.tokenizer, "", "how text becomes tokens",
              {"byte", "sentencepiece"})
      .Int("--vocab_size", &flags.vocab_size, "N", "sentencepiece vocabulary to train (0: 8000)",
           {0, kMaxVocabSize})
      .String("--sp_model", &flags.options.sp_model, "PATH",
              "sentencepiece model to use instead of training one")
      .Bool("--split_on_percent_lines", &flags.options.split_on_percent_lines,
            "fortune files: documents end at lines of just %")
      .Int("--workers", &flags.workers, "N", "tokenizing threads", {1, kMaxWorkers});
  return table;
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
  command.options = flags.options;
  command.options.vocab_size = static_cast<int>(flags.vocab_size);
  command.options.workers = static_cast<int>(flags.workers);
  if (command.options.inputs.empty()) return absl::InvalidArgumentError("--input is required");
  if (command.options.output_prefix.empty()) return absl::InvalidArgumentError("--output is required");
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

// Command line of dsprep, the dataset preparation tool:
//
//   dsprep --input FILE_OR_GLOB [--input ...] --output PREFIX
//          [--tokenizer byte|sentencepiece|model] [--vocab_size N] [--sp_model PATH]
//          [--model_dir DIR] [--split_on_percent_lines] [--workers N]
//   dsprep --format alpaca|prompt_response|chat --records FILE_OR_GLOB [--records ...]
//          --output PREFIX --sequence_length N [--tokenizer ...] [--chat_template FILE]
//          [--prompt_field NAME] [--response_field NAME]
//          [--on_bad_record refuse|skip] [--on_long_record refuse|skip|truncate]
//
// --format text (the default) prepares text files (PrepareDataset); the
// other formats prepare instruction records (PrepareInstructionDataset).
//
// The flags are a common/flag_table.h table (exact names, `--flag value` or
// `--flag=value`, --help and --version generated from it).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/data/prepare_dataset.h"
#include "runtime/data/prepare_instructions.h"

namespace dslaunch::runtime {

struct DsprepCommand {
  bool instruction = false;                  // --format other than text
  PrepareOptions options;                    // text
  InstructionPrepareOptions instruction_options;  // instruction records
  bool help = false;
  bool version = false;
};

// Parses the arguments after argv[0] (and reads --chat_template). Errors name
// the flag: unknown, missing value, bad number, a missing --input/--records
// or --output (unless --help or --version), and a flag of the other mode.
absl::StatusOr<DsprepCommand> ParseDsprepArgs(const std::vector<std::string>& args);

std::string DsprepUsage();
std::string DsprepVersion();

}  // namespace dslaunch::runtime

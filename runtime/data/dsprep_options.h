// Command line of dsprep, the dataset preparation tool:
//
//   dsprep --input FILE_OR_GLOB [--input ...] --output PREFIX
//          [--tokenizer byte|sentencepiece] [--vocab_size N] [--sp_model PATH]
//          [--split_on_percent_lines] [--workers N]
//
// The flags are a common/flag_table.h table (exact names, `--flag value` or
// `--flag=value`, --help and --version generated from it).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/data/prepare_dataset.h"

namespace dslaunch::runtime {

struct DsprepCommand {
  PrepareOptions options;
  bool help = false;
  bool version = false;
};

// Parses the arguments after argv[0]. Errors name the flag: unknown, missing
// value, bad number, and a missing --input or --output (unless --help or
// --version).
absl::StatusOr<DsprepCommand> ParseDsprepArgs(const std::vector<std::string>& args);

std::string DsprepUsage();
std::string DsprepVersion();

}  // namespace dslaunch::runtime

// Command line of dsprep, the dataset preparation tool:
//
//   dsprep --input FILE_OR_GLOB [--input ...] --output PREFIX
//          [--tokenizer byte|sentencepiece] [--vocab_size N] [--sp_model PATH]
//          [--split_on_percent_lines] [--workers N]
//
// Every flag is one row of the table in dsprep_options.cc, which also
// generates --help.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/data/prepare_dataset.h"

namespace dslaunch::runtime {

struct DsprepCommand {
  PrepareOptions options;
  bool help = false;
};

// Parses the arguments after argv[0]. Accepts "--flag value" and
// "--flag=value". Errors name the flag: unknown, missing value, bad number,
// and a missing --input or --output (unless --help).
absl::StatusOr<DsprepCommand> ParseDsprepArgs(const std::vector<std::string>& args);

std::string DsprepUsage();

}  // namespace dslaunch::runtime

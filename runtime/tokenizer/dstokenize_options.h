// dstokenize's command line (dstokenize_main.cc).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

struct DstokenizeOptions {
  std::string tokenizer;         // a tokenizer.json, tokenizer.model or model folder
  std::optional<bool> add_bos;   // unset: the tokenizer's own convention (Tokenizer::adds_bos)
  std::optional<bool> add_eos;
  bool plain_text = false;       // special-token strings are ordinary text (EncodePlainText)
  bool json_lines = false;       // each input line is a JSON string literal ("a\nb")
};

struct DstokenizeCommand {
  DstokenizeOptions options;
  bool help = false;
  bool version = false;
};

// Errors name the flag.
absl::StatusOr<DstokenizeCommand> ParseDstokenizeArgs(const std::vector<std::string>& args);
std::string DstokenizeUsage();
std::string DstokenizeVersion();

}  // namespace dslaunch::runtime

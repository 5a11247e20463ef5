#include "runtime/data/dsprep_options.h"

#include <algorithm>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace {

struct Flag {
  const char* name;
  const char* value_name;  // nullptr: a switch without value
  const char* doc;
  std::function<absl::Status(const std::string& value, DsprepCommand* command)> apply;
};

// Upper bounds (docs/inputs.md): the vocabulary a job file may ask for
// (data.tokenizer_vocab_size), and threads well past any machine's cores.
constexpr int kMaxVocabSize = 1 << 21;
constexpr int kMaxWorkers = 1024;

absl::Status ParseInt(const std::string& flag, const std::string& value, int max, int* out) {
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " expects a number, got \"", value, "\""));
  }
  if (parsed > max) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", value, ": at most ", max));
  }
  *out = parsed;
  return absl::OkStatus();
}

const std::vector<Flag>& Flags() {
  static const auto* flags = new std::vector<Flag>{
      {"input", "FILE_OR_GLOB", "text file, directory or glob; repeatable",
       [](const std::string& v, DsprepCommand* c) {
         c->options.inputs.push_back(v);
         return absl::OkStatus();
       }},
      {"output", "PREFIX", "writes PREFIX.bin and PREFIX.idx (and PREFIX.model)",
       [](const std::string& v, DsprepCommand* c) {
         c->options.output_prefix = v;
         return absl::OkStatus();
       }},
      {"tokenizer", "byte|sentencepiece", "default byte",
       [](const std::string& v, DsprepCommand* c) {
         c->options.tokenizer = v;
         return absl::OkStatus();
       }},
      {"vocab_size", "N", "sentencepiece vocabulary to train (default 8000)",
       [](const std::string& v, DsprepCommand* c) {
         return ParseInt("vocab_size", v, kMaxVocabSize, &c->options.vocab_size);
       }},
      {"sp_model", "PATH", "sentencepiece model to use instead of training one",
       [](const std::string& v, DsprepCommand* c) {
         c->options.sp_model = v;
         return absl::OkStatus();
       }},
      {"split_on_percent_lines", nullptr, "fortune files: documents end at lines of just %",
       [](const std::string&, DsprepCommand* c) {
         c->options.split_on_percent_lines = true;
         return absl::OkStatus();
       }},
      {"workers", "N", "tokenizing threads (default 1)",
       [](const std::string& v, DsprepCommand* c) {
         return ParseInt("workers", v, kMaxWorkers, &c->options.workers);
       }},
      {"help", nullptr, "print this help",
       [](const std::string&, DsprepCommand* c) {
         c->help = true;
         return absl::OkStatus();
       }},
  };
  return *flags;
}

}  // namespace

absl::StatusOr<DsprepCommand> ParseDsprepArgs(const std::vector<std::string>& args) {
  DsprepCommand command;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h") {
      command.help = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", arg, "\" (flags start with --)"));
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_inline_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_inline_value = true;
    }
    const Flag* flag = nullptr;
    for (const Flag& candidate : Flags()) {
      if (name == candidate.name) flag = &candidate;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (flag->value_name == nullptr && has_inline_value) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
    }
    if (flag->value_name != nullptr && !has_inline_value) {
      if (i + 1 == args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value (", flag->value_name, ")"));
      }
      value = args[++i];
    }
    absl::Status applied = flag->apply(value, &command);
    if (!applied.ok()) return applied;
  }
  if (command.help) return command;
  if (command.options.inputs.empty()) return absl::InvalidArgumentError("--input is required");
  if (command.options.output_prefix.empty()) return absl::InvalidArgumentError("--output is required");
  return command;
}

std::string DsprepUsage() {
  std::string usage =
      "usage: dsprep --input FILE_OR_GLOB [--input ...] --output PREFIX [flags]\n"
      "Tokenizes text files into an indexed dataset (PREFIX.bin, PREFIX.idx).\n";
  for (const Flag& flag : Flags()) {
    std::string left = absl::StrCat("  --", flag.name, flag.value_name ? " " : "",
                                    flag.value_name ? flag.value_name : "");
    left.resize(std::max<size_t>(left.size() + 2, 40), ' ');
    absl::StrAppend(&usage, left, flag.doc, "\n");
  }
  return usage;
}

}  // namespace dslaunch::runtime

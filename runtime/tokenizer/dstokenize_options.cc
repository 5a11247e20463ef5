#include "runtime/tokenizer/dstokenize_options.h"

#include "absl/strings/str_cat.h"
#include "common/flag_table.h"

namespace dslaunch::runtime {
namespace {

struct DstokenizeFlags {
  DstokenizeOptions options;
  bool add_bos = false, no_bos = false, add_eos = false, no_eos = false;
};

FlagTable DstokenizeFlagTable(DstokenizeFlags& flags) {
  FlagTable table("dstokenize",
                  "dstokenize --tokenizer PATH [--add_bos|--no_bos] < lines\n"
                  "Prints the token ids of each line of stdin on one line, space-separated.");
  table.String("--tokenizer", &flags.options.tokenizer, "PATH",
               "a tokenizer.json, a tokenizer.model, or a model folder holding one")
      .Bool("--add_bos", &flags.add_bos, "start every line with bos (default: as the model does)")
      .Bool("--no_bos", &flags.no_bos, "never add bos")
      .Bool("--add_eos", &flags.add_eos, "end every line with eos (default: as the model does)")
      .Bool("--no_eos", &flags.no_eos, "never add eos")
      .Bool("--plain_text", &flags.options.plain_text,
            "special-token strings in the text (<|eot_id|>) are ordinary text, not special ids")
      .Bool("--json_lines", &flags.options.json_lines,
            "each line is a JSON string (\"a\\nb\"), for texts with newlines");
  return table;
}

// --X and --no_X: at most one; neither leaves the choice to the tokenizer.
absl::StatusOr<std::optional<bool>> Either(bool yes, bool no, const char* name) {
  if (yes && no) return absl::InvalidArgumentError(absl::StrCat("--add_", name, " and --no_", name, " contradict"));
  if (yes) return std::optional<bool>(true);
  if (no) return std::optional<bool>(false);
  return std::optional<bool>();
}

}  // namespace

absl::StatusOr<DstokenizeCommand> ParseDstokenizeArgs(const std::vector<std::string>& args) {
  DstokenizeCommand command;
  DstokenizeFlags flags;
  FlagTable table = DstokenizeFlagTable(flags);
  if (absl::Status parsed = table.Parse(args); !parsed.ok()) return parsed;
  command.help = table.help_requested();
  command.version = table.version_requested();
  if (command.help || command.version) return command;
  if (!table.positionals().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", table.positionals().front(), "\" (flags start with --)"));
  }
  if (flags.options.tokenizer.empty()) return absl::InvalidArgumentError("--tokenizer is required");
  command.options = flags.options;
  auto bos = Either(flags.add_bos, flags.no_bos, "bos");
  if (!bos.ok()) return bos.status();
  auto eos = Either(flags.add_eos, flags.no_eos, "eos");
  if (!eos.ok()) return eos.status();
  command.options.add_bos = *bos;
  command.options.add_eos = *eos;
  return command;
}

std::string DstokenizeUsage() {
  DstokenizeFlags flags;
  return DstokenizeFlagTable(flags).Help();
}

std::string DstokenizeVersion() {
  DstokenizeFlags flags;
  return DstokenizeFlagTable(flags).Version();
}

}  // namespace dslaunch::runtime

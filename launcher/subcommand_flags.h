// The start every `dslaunch <subcommand>` shares (estimate, report): its
// flags parsed, --help and --version answered, a stray argument refused.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/flag_table.h"
#include "launcher/launcher_notice.h"

namespace dslaunch {

// nullopt: go on. Otherwise the exit code, having printed the help, the
// version or the error (`stray` names what to do with a positional).
// With `allow_positionals` the caller judges them (flags.positionals()).
inline EarlyExit ParseSubcommandFlags(FlagTable& flags, const std::vector<std::string>& args,
                                      const std::string& subcommand, const std::string& stray,
                                      bool allow_positionals = false) {
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) return UsageError(parsed);  // it names --help
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (flags.version_requested()) {
    std::puts(flags.Version().c_str());
    return 0;
  }
  if (!allow_positionals && !flags.positionals().empty()) {
    Notice(absl::StrCat(subcommand, ": unexpected argument '", flags.positionals().front(), "'", stray));
    return kUsageError;
  }
  return std::nullopt;
}

}  // namespace dslaunch

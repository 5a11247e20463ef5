// Minimal line logger for the daemons: "<time> <program> <message>" on stderr,
// one write per line so lines of concurrent threads do not interleave.
#pragma once

#include "absl/strings/string_view.h"

namespace dslaunch {

// Sets the program name printed on every line (e.g. "dsagent[node0]").
void SetLogProgramName(absl::string_view name);

// Writes one line to stderr.
void LogLine(absl::string_view message);

}  // namespace dslaunch

// dslaunch's own one-line messages ("dslaunch: ..." on stderr) and the exit
// codes of a run that ends before its job does (docs/control-plane.md, Exit
// codes).
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"

namespace dslaunch {

// Bad input: an option, hostfile, job file or override.
inline constexpr int kUsageError = 2;
// An agent could not be started or reached, the store could not start.
inline constexpr int kLaunchError = 1;

// A step of the launch either goes on (nullopt) or ends dslaunch with this
// exit code, having said why.
using EarlyExit = std::optional<int>;

// Writes "dslaunch: <message>" and a newline to stderr, at once.
void Notice(const std::string& message);

// Says the status's message; returns kUsageError.
int UsageError(const absl::Status& status);

}  // namespace dslaunch

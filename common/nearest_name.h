// The one "did you mean" of dslaunch: every typo suggestion (command-line
// flags of every binary, config keys and enum values) goes through
// NearestName, so they all suggest by the same rule.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace dslaunch {

// Edits (insert, delete, substitute, swap two neighbours) between `a` and `b`,
// ignoring ASCII case.
int EditDistance(absl::string_view a, absl::string_view b);

// The candidate nearest to `name`, or "" when none is close enough to be a
// slip of the keyboard: at most two edits (a quarter of the name for long
// names) and never more than half the name ('z' is not a misspelt 'x').
std::string NearestName(absl::string_view name, const std::vector<std::string>& candidates);

}  // namespace dslaunch

// A string as a JSON string literal, quotes included: '"' and '\' escaped,
// control characters as \n, \t, ... or \u00XX, and bytes that are not
// valid UTF-8 (ranks print anything) replaced by \ufffd so the result stays
// valid JSON. Every JSON this project writes (event logs, config.json,
// safetensors headers) quotes its strings here. Plain C++.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace dslaunch {

std::string JsonQuote(absl::string_view text);

}  // namespace dslaunch

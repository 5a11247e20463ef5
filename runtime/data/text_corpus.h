// Text files -> documents, the input side of dataset preparation.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dslaunch::runtime {

struct TextCorpusOptions {
  // Fortune-database format (Debian's `fortunes` package): documents are
  // separated by lines holding just "%". Otherwise a file is one document.
  bool split_on_percent_lines = false;
};

// Expands each input, in order, to regular files:
//   a file          -> itself, whatever its name;
//   a directory     -> its regular files (not recursive), sorted;
//   a glob (*?[)    -> its matches (glob(3), sorted), regular files only.
// From directories and globs, the `.dat` and `.u8` companions of fortune
// databases are skipped. A path listed twice is read once. Errors name the
// input that matched nothing or does not exist.
absl::StatusOr<std::vector<std::string>> ExpandInputPaths(const std::vector<std::string>& inputs);

// Splits fortune-style text on lines that are exactly "%" (a trailing "\r" is
// tolerated). Documents keep their own newlines; blank ones are dropped.
std::vector<std::string> SplitOnPercentLines(absl::string_view text);

// The documents of one file: the whole file, or its percent-separated parts.
// Blank (whitespace-only) documents are dropped.
absl::StatusOr<std::vector<std::string>> ReadTextDocuments(const std::string& path,
                                                           const TextCorpusOptions& options);

}  // namespace dslaunch::runtime

// JSON text -> a parsed value, and the files instruction records come in
// (JSON arrays and JSON Lines) -> one text span per record.
//
// Note [JSON through yaml-cpp]
// JSON is parsed with yaml-cpp (as runtime/hf/ does): JSON is almost a subset
// of YAML 1.2's flow style. Two differences matter on real data and are
// handled here, before yaml-cpp sees the text:
//   - A character outside the Basic Multilingual Plane is written by JSON
//     writers (Python's json.dump with its default ensure_ascii) as a UTF-16
//     surrogate pair, "\ud83d\ude00"; yaml-cpp refuses each half ("invalid
//     unicode"). The pair is rewritten as YAML's "\U0001f600" first. A lone
//     surrogate is not a character and is an error.
//   - yaml-cpp accepts much that JSON does not: unquoted words and keys,
//     single quotes, comments, a raw newline inside a string (folded into a
//     space), text after the value (`{...} {...}` reads as the first), and a
//     repeated key (it keeps the first; Python's json keeps the last). These
//     are checked on the text and on the parsed tree and are errors. Callers
//     that need a JSON string check IsJsonString (a quoted scalar), so
//     numbers, booleans and null are told apart from strings.
// ParseJsonValue is the one place that parses; a strict JSON reader can
// replace it without touching its callers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace dslaunch::runtime {

// Parses one JSON value. Errors say what is wrong and where (line and column
// within `text`), without naming a file: callers add it.
absl::StatusOr<YAML::Node> ParseJsonValue(absl::string_view text);

// A JSON string (a quoted scalar), not a number, boolean or null.
bool IsJsonString(const YAML::Node& node);

// "a string", "a number or boolean", "null", "a list", "an object": how a
// value's type is named in errors.
std::string DescribeJsonType(const YAML::Node& node);

// The text of one record and where it starts in its file (1-based line).
struct RecordText {
  int64_t line = 0;
  std::string text;
};

// Splits a records file into records, without parsing them:
//   a file whose first non-blank character is '[' is one JSON array, each
//     element a record (its line is where the element starts);
//   any other file is JSON Lines: each non-blank line is a record.
// Only the array's structure is checked here (brackets, strings, commas);
// a record's own syntax is checked when it is parsed, so that one bad record
// can be skipped. Errors (an unterminated array, string or bracket) name the
// line; callers add the file.
absl::StatusOr<std::vector<RecordText>> SplitRecords(absl::string_view contents);

}  // namespace dslaunch::runtime

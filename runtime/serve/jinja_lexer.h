// Jinja source -> segments -> tokens, for the parser (jinja_parser.cc; Note
// [Chat templates in Jinja], jinja_template.h). Internal to runtime/serve.
//  - Scan splits a template into text and the code of its {{ }} and {% %}
//    tags, applying the whitespace rules transformers renders with
//    (trim_blocks, lstrip_blocks, "-" and "+"); {# #} comments are dropped.
//  - Tokenize splits a tag's code into names, literals and operators.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dslaunch::runtime {
namespace jinja_syntax {

// A piece of the source: text, or the code of a {{ }} or {% %} tag.
struct Segment {
  enum Kind { kText, kExpression, kStatement } kind = kText;
  std::string text;
  int line = 1;
};

// Errors name `origin` and the line.
absl::StatusOr<std::vector<Segment>> Scan(absl::string_view source, const std::string& origin);

struct Token {
  enum Kind { kName, kString, kInt, kFloat, kOperator, kEnd } kind = kEnd;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
};

// Errors name `where` (the template and line of the tag).
absl::StatusOr<std::vector<Token>> Tokenize(const std::string& code, const std::string& where);

}  // namespace jinja_syntax
}  // namespace dslaunch::runtime

// Note [Chat templates in Jinja]: the template's source -> segments -> tokens.
#include "runtime/serve/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace jinja_syntax {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

int LineOf(absl::string_view source, size_t at) {
  return 1 + static_cast<int>(std::count(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
}

}  // namespace

// Splits the source into segments, applying the whitespace rules
// transformers renders with (trim_blocks, lstrip_blocks, "-" and "+").
absl::StatusOr<std::vector<Segment>> Scan(absl::string_view source, const std::string& origin) {
  std::vector<Segment> segments;
  size_t at = 0;
  bool strip_next = false;  // a "-" closed the last tag
  bool trim_newline = false;  // a block or comment tag closed (trim_blocks)
  while (at <= source.size()) {
    size_t open = source.find('{', at);
    while (open != absl::string_view::npos && open + 1 < source.size() && source[open + 1] != '{' &&
           source[open + 1] != '%' && source[open + 1] != '#') {
      open = source.find('{', open + 1);
    }
    if (open != absl::string_view::npos && open + 1 >= source.size()) open = absl::string_view::npos;
    std::string text(source.substr(at, open == absl::string_view::npos ? absl::string_view::npos : open - at));
    if (trim_newline && !text.empty() && text[0] == '\n') text.erase(0, 1);
    if (trim_newline && absl::StartsWith(text, "\r\n")) text.erase(0, 2);
    if (strip_next) text = std::string(absl::StripLeadingAsciiWhitespace(text));
    if (open == absl::string_view::npos) {
      if (!text.empty()) segments.push_back({Segment::kText, text, LineOf(source, at)});
      break;
    }
    const char kind = source[open + 1];
    const bool minus = open + 2 < source.size() && source[open + 2] == '-';
    const bool plus = open + 2 < source.size() && source[open + 2] == '+';
    if (minus) {
      text = std::string(absl::StripTrailingAsciiWhitespace(text));
    } else if ((kind == '%' || kind == '#') && !plus) {
      // lstrip_blocks: the spaces and tabs between the start of the tag's
      // line and the tag, when nothing else is there.
      size_t blank = open;
      while (blank > at && IsBlank(source[blank - 1])) --blank;
      if (blank == 0 || source[blank - 1] == '\n') {
        size_t start = text.size();
        while (start > 0 && IsBlank(text[start - 1])) --start;
        text.erase(start);
      }
    }
    if (!text.empty()) segments.push_back({Segment::kText, text, LineOf(source, at)});
    const int line = LineOf(source, open);
    size_t code_start = open + 2 + ((minus || plus) ? 1 : 0);
    if (kind == '#') {
      const size_t end = source.find("#}", code_start);
      if (end == absl::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(origin, ":", line, ": a comment {# is never closed"));
      }
      strip_next = end > code_start && source[end - 1] == '-';
      trim_newline = !strip_next;
      at = end + 2;
      continue;
    }
    const char close = kind == '{' ? '}' : '%';
    // The tag ends at the first close outside a string and outside
    // brackets ("{{ {'a': {'b': 1}} }}").
    size_t end = code_start;
    char quote = 0;
    int depth = 0;
    for (; end + 1 < source.size(); ++end) {
      const char c = source[end];
      if (quote) {
        if (c == '\\') {
          ++end;
        } else if (c == quote) {
          quote = 0;
        }
        continue;
      }
      if (c == '\'' || c == '"') {
        quote = c;
      } else if (depth == 0 && c == close && source[end + 1] == '}') {
        break;
      } else if (c == '{' || c == '(' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ')' || c == ']') && depth > 0) {
        --depth;
      }
    }
    if (end + 1 >= source.size()) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ":", line, ": a tag ", kind == '{' ? "{{" : "{%",
                                                     " is never closed"));
    }
    strip_next = end > code_start && source[end - 1] == '-';
    const bool keep_newline = end > code_start && source[end - 1] == '+';  // "+%}": no trim_blocks here
    std::string code(source.substr(code_start, end - code_start - (strip_next || keep_newline ? 1 : 0)));
    segments.push_back({kind == '{' ? Segment::kExpression : Segment::kStatement, code, line});
    trim_newline = kind == '%' && !strip_next && !keep_newline;
    at = end + 2;
  }
  return segments;
}

absl::StatusOr<std::vector<Token>> Tokenize(const std::string& code, const std::string& where) {
  static const char* kOperators[] = {"//", "==", "!=", "<=", ">=", "**", "(", ")", "[", "]", "{", "}", ",", ":",
                                     ".",  "|",  "+",  "-",  "*",  "/",  "%", "~", "<", ">", "="};
  std::vector<Token> tokens;
  size_t i = 0;
  while (i < code.size()) {
    const char c = code[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < code.size() && (std::isalnum(static_cast<unsigned char>(code[j])) || code[j] == '_')) ++j;
      tokens.push_back({Token::kName, code.substr(i, j - i)});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < code.size() && (std::isdigit(static_cast<unsigned char>(code[j])) || code[j] == '_' ||
                                 (code[j] == '.' && j + 1 < code.size() &&
                                  std::isdigit(static_cast<unsigned char>(code[j + 1]))))) {
        is_float = is_float || code[j] == '.';
        ++j;
      }
      std::string digits = code.substr(i, j - i);
      digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
      Token token{is_float ? Token::kFloat : Token::kInt, digits};
      const bool read = is_float ? absl::SimpleAtod(digits, &token.float_value) && std::isfinite(token.float_value)
                                 : absl::SimpleAtoi(digits, &token.int_value);
      if (!read) return absl::InvalidArgumentError(absl::StrCat(where, ": the number ", digits, " is out of range"));
      tokens.push_back(token);
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string text;
      size_t j = i + 1;
      for (; j < code.size() && code[j] != c; ++j) {
        if (code[j] != '\\' || j + 1 >= code.size()) {
          text += code[j];
          continue;
        }
        const char e = code[++j];
        switch (e) {
          case 'n':
            text += '\n';
            break;
          case 't':
            text += '\t';
            break;
          case 'r':
            text += '\r';
            break;
          case '\\':
          case '\'':
          case '"':
            text += e;
            break;
          default:
            text += '\\';
            text += e;
        }
      }
      if (j >= code.size()) return absl::InvalidArgumentError(absl::StrCat(where, ": a string is never closed"));
      tokens.push_back({Token::kString, text});
      i = j + 1;
      continue;
    }
    bool matched = false;
    for (const char* op : kOperators) {
      if (code.compare(i, std::strlen(op), op) == 0) {
        tokens.push_back({Token::kOperator, op});
        i += std::strlen(op);
        matched = true;
        break;
      }
    }
    if (!matched) return absl::InvalidArgumentError(absl::StrCat(where, ": unexpected character '", std::string(1, c), "'"));
  }
  tokens.push_back({Token::kEnd, ""});
  return tokens;
}

}  // namespace jinja_syntax
}  // namespace dslaunch::runtime

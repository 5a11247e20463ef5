#include "runtime/data/json_text.h"

#include <cctype>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dslaunch::runtime {
namespace {

// Position of text[offset] as "line L, column C" (both 1-based).
std::string Where(absl::string_view text, size_t offset) {
  int64_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return absl::StrCat("line ", line, ", column ", offset - line_start + 1);
}

// The value of the 4 hex digits at text[at], or -1.
int HexQuad(absl::string_view text, size_t at) {
  if (at + 4 > text.size()) return -1;
  int value = 0;
  for (size_t i = at; i < at + 4; ++i) {
    const char c = text[i];
    int digit = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
                : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                            : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Note [JSON through yaml-cpp]: what yaml-cpp would accept but JSON does not,
// checked on the text: YAML syntax outside strings (quotes ', anchors,
// comments, bare words other than true/false/null), raw control characters
// inside strings (yaml-cpp folds a raw newline into a space), and text after
// the value (yaml-cpp reads `{...} {...}` as its first value).
absl::Status CheckJsonSyntax(absl::string_view text) {
  auto error = [&](size_t at, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON (", Where(text, at), "): ", what));
  };
  int depth = 0;
  bool in_string = false;
  bool ended = false;  // a whole value has been read
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (static_cast<unsigned char>(c) < 0x20) {
        return error(i, absl::StrFormat("a raw control character (U+%04X) in a string; JSON escapes it", static_cast<int>(c)));
      }
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
        ended = depth == 0;
      }
      continue;
    }
    if (IsBlank(c)) continue;
    if (ended) return error(i, "text after the JSON value");
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
      if (depth < 0) return error(i, absl::StrCat("'", std::string(1, c), "' without its opening bracket"));
      ended = depth == 0;
    } else if (c == ',' || c == ':') {
      continue;
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.') {
      size_t end = i;
      while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '-' ||
                                   text[end] == '+' || text[end] == '.')) {
        ++end;
      }
      absl::string_view word = text.substr(i, end - i);
      const bool number = std::isdigit(static_cast<unsigned char>(c)) || c == '-';
      if (!number && word != "true" && word != "false" && word != "null") {
        return error(i, absl::StrCat("'", word, "' is not a JSON value (strings are in double quotes)"));
      }
      i = end - 1;
      ended = depth == 0;
    } else {
      return error(i, absl::StrCat("'", std::string(1, c), "' is not JSON"));
    }
  }
  return absl::OkStatus();
}

// JSON parsers differ on a repeated key (Python keeps the last, yaml-cpp the
// first): an error naming it.
absl::Status CheckUniqueKeys(const YAML::Node& node, const std::string& path) {
  if (node.IsMap()) {
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string key = it->first.Scalar();
      const std::string at = path.empty() ? key : absl::StrCat(path, ".", key);
      if (!seen.insert(key).second) {
        return absl::InvalidArgumentError(absl::StrCat("invalid JSON: key '", at, "' appears twice"));
      }
      absl::Status inner = CheckUniqueKeys(it->second, at);
      if (!inner.ok()) return inner;
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      absl::Status inner = CheckUniqueKeys(node[i], absl::StrCat(path, "[", i, "]"));
      if (!inner.ok()) return inner;
    }
  }
  return absl::OkStatus();
}

// Note [JSON through yaml-cpp]: surrogate pairs -> \UXXXXXXXX.
absl::StatusOr<std::string> RewriteSurrogatePairs(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!in_string) {
      if (c == '"') in_string = true;
      out.push_back(c);
      continue;
    }
    if (c == '"') {
      in_string = false;
      out.push_back(c);
      continue;
    }
    if (c != '\\' || i + 1 >= text.size()) {
      out.push_back(c);
      continue;
    }
    if (text[i + 1] != 'u') {  // a two-character escape, copied whole
      out.append(text.data() + i, 2);
      ++i;
      continue;
    }
    const int unit = HexQuad(text, i + 2);
    if (unit < 0xD800 || unit > 0xDFFF) {  // not a surrogate (or malformed: yaml-cpp says so)
      out.append(text.data() + i, 2);
      ++i;
      continue;
    }
    const int low = (text.substr(i + 6, 2) == "\\u") ? HexQuad(text, i + 8) : -1;
    if (unit > 0xDBFF || low < 0xDC00 || low > 0xDFFF) {
      return absl::InvalidArgumentError(
          absl::StrFormat("invalid JSON (%s): \\u%04x is half of a UTF-16 surrogate pair without its other half",
                          Where(text, i), unit));
    }
    const int code_point = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
    absl::StrAppendFormat(&out, "\\U%08x", code_point);
    i += 11;  // the two escapes, 12 characters
  }
  return out;
}


absl::string_view WithoutByteOrderMark(absl::string_view contents) {
  if (contents.substr(0, 3) == "\xEF\xBB\xBF") contents.remove_prefix(3);
  return contents;
}

std::vector<RecordText> SplitLines(absl::string_view contents) {
  std::vector<RecordText> records;
  int64_t line = 0;
  size_t start = 0;
  while (start <= contents.size()) {
    size_t end = contents.find('\n', start);
    if (end == absl::string_view::npos) end = contents.size();
    ++line;
    absl::string_view text = contents.substr(start, end - start);
    if (!absl::StripAsciiWhitespace(text).empty()) records.push_back({line, std::string(text)});
    start = end + 1;
  }
  return records;
}

// The elements of the JSON array that `contents` holds (its first non-blank
// character is '[').
absl::StatusOr<std::vector<RecordText>> SplitArray(absl::string_view contents) {
  std::vector<RecordText> records;
  int64_t line = 1;
  size_t i = 0;
  auto skip_blanks = [&]() {
    while (i < contents.size() && IsBlank(contents[i])) {
      if (contents[i] == '\n') ++line;
      ++i;
    }
  };
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON array (line ", line, "): ", what));
  };
  skip_blanks();
  ++i;  // the '['
  skip_blanks();
  if (i < contents.size() && contents[i] == ']') {
    ++i;
  } else {
    while (true) {
      skip_blanks();
      const size_t begin = i;
      const int64_t begin_line = line;
      int depth = 0;
      bool in_string = false;
      for (; i < contents.size(); ++i) {
        const char c = contents[i];
        if (c == '\n') ++line;
        if (in_string) {
          if (c == '\\') {
            ++i;
          } else if (c == '"') {
            in_string = false;
          }
          continue;
        }
        if (c == '"') {
          in_string = true;
        } else if (c == '{' || c == '[') {
          ++depth;
        } else if (c == '}' || c == ']') {
          if (depth == 0) break;
          --depth;
        } else if (c == ',' && depth == 0) {
          break;
        }
      }
      if (i >= contents.size()) {
        return error(absl::StrCat("the element starting at line ", begin_line,
                                  in_string ? " has an unterminated string" : " is not closed",
                                  " before the end of the file"));
      }
      absl::string_view element = absl::StripTrailingAsciiWhitespace(contents.substr(begin, i - begin));
      if (element.empty()) return error("an empty element (two commas, or a comma before ']')");
      records.push_back({begin_line, std::string(element)});
      if (contents[i] == '}') return error("'}' without its '{'");
      const bool last = contents[i] == ']';
      ++i;
      if (last) break;
    }
  }
  skip_blanks();
  if (i != contents.size()) return error("text after the array's closing ']'");
  return records;
}

}  // namespace

absl::StatusOr<YAML::Node> ParseJsonValue(absl::string_view text) {
  if (absl::Status syntax = CheckJsonSyntax(text); !syntax.ok()) return syntax;
  absl::StatusOr<std::string> rewritten = RewriteSurrogatePairs(text);
  if (!rewritten.ok()) return rewritten.status();
  YAML::Node node;
  try {
    node = YAML::Load(*rewritten);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON (line ", e.mark.line + 1, ", column ", e.mark.column + 1, "): ", e.msg));
  }
  if (absl::Status keys = CheckUniqueKeys(node, ""); !keys.ok()) return keys;
  return node;
}

bool IsJsonString(const YAML::Node& node) { return node.IsScalar() && node.Tag() == "!"; }

std::string DescribeJsonType(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsMap()) return "an object";
  if (node.IsSequence()) return "a list";
  if (IsJsonString(node)) return "a string";
  return absl::StrCat("the value ", node.Scalar());
}

absl::StatusOr<std::vector<RecordText>> SplitRecords(absl::string_view contents) {
  contents = WithoutByteOrderMark(contents);
  absl::string_view start = absl::StripLeadingAsciiWhitespace(contents);
  if (!start.empty() && start.front() == '[') return SplitArray(contents);
  return SplitLines(contents);
}

}  // namespace dslaunch::runtime

#include "runtime/serve/tool_call_parser.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/serve/jinja_value.h"
#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {
namespace {

constexpr char kHermesOpen[] = "<tool_call>";
constexpr char kHermesClose[] = "</tool_call>";
constexpr char kPythonTag[] = "<|python_tag|>";
constexpr size_t kHermesOpenSize = sizeof(kHermesOpen) - 1;
constexpr size_t kHermesCloseSize = sizeof(kHermesClose) - 1;
constexpr size_t kPythonTagSize = sizeof(kPythonTag) - 1;

// Where JSON text stands as its bytes come: inside a string, or how deep in
// objects and arrays. A call ends only where its text is back at the top
// level, so each call is parsed once (a closing tag or a ';' inside one of
// its strings is passed over here, not by parsing every prefix: an answer of
// many of them would cost time quadratic in its length).
class JsonNesting {
 public:
  void Take(char c) {
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      return;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if ((c == '}' || c == ']') && depth_ > 0) {
      --depth_;
    }
  }
  bool at_top() const { return !in_string_ && depth_ == 0; }

 private:
  bool in_string_ = false, escaped_ = false;
  size_t depth_ = 0;
};

// One call's JSON object: its name (one of `tool_names`) and an object of
// arguments under one of `argument_keys` (absent: {}). False when it is not one.
bool ReadCall(absl::string_view text, const std::vector<absl::string_view>& argument_keys,
              const std::vector<std::string>& tool_names, ParsedToolCall* call) {
  auto json = ParseJsonLastKeyWins(absl::StripAsciiWhitespace(text), "a tool call");
  if (!json.ok() || !json->is_object()) return false;
  const JsonValue* name = json->Find("name");
  if (name == nullptr || !name->is_string() ||
      std::find(tool_names.begin(), tool_names.end(), name->string_value()) == tool_names.end()) {
    return false;
  }
  const JsonValue* arguments = nullptr;
  for (absl::string_view key : argument_keys) {
    if ((arguments = json->Find(key)) != nullptr) break;
  }
  call->name = name->string_value();
  if (arguments == nullptr) {
    call->arguments = "{}";
    return true;
  }
  // Arguments given as JSON text are read too (some models quote them).
  JsonValue parsed;
  if (arguments->is_string()) {
    auto inner = ParseJsonLastKeyWins(arguments->string_value(), "a tool call's arguments");
    if (!inner.ok()) return false;
    parsed = *std::move(inner);
    arguments = &parsed;
  }
  if (!arguments->is_object()) return false;
  auto written = JinjaValueFromJson(*arguments).Json(-1);
  if (!written.ok()) return false;
  call->arguments = *std::move(written);
  return true;
}

ToolCallReading ReadHermes(const std::string& text, const std::vector<std::string>& tool_names) {
  ToolCallReading reading;
  const size_t first = text.find(kHermesOpen);
  if (first == std::string::npos) return {text, {}};
  reading.content = text.substr(0, first);
  size_t at = first;
  while (at != std::string::npos) {
    const size_t body = at + kHermesOpenSize;
    // The call ends at the first closing tag outside its JSON's strings and
    // brackets (a string inside the call may hold the tag's text), or at the
    // end of the answer.
    size_t close = std::string::npos;
    JsonNesting nesting;
    for (size_t i = body; i < text.size(); ++i) {
      if (nesting.at_top() && text.compare(i, kHermesCloseSize, kHermesClose) == 0) {
        close = i;
        break;
      }
      nesting.Take(text[i]);
    }
    const size_t end = close == std::string::npos ? text.size() : close;
    ParsedToolCall call;
    if (!ReadCall(absl::string_view(text).substr(body, end - body), {"arguments", "parameters"}, tool_names, &call)) {
      return {text, {}};
    }
    reading.calls.push_back(std::move(call));
    if (close == std::string::npos) break;
    // Text between or after the calls is content too (what is not blank).
    const size_t after = close + kHermesCloseSize;
    at = text.find(kHermesOpen, after);
    const absl::string_view between =
        absl::string_view(text).substr(after, (at == std::string::npos ? text.size() : at) - after);
    if (!absl::StripAsciiWhitespace(between).empty()) absl::StrAppend(&reading.content, between);
  }
  return reading;
}

ToolCallReading ReadLlama3Json(const std::string& text, const std::vector<std::string>& tool_names) {
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(text);
  absl::ConsumePrefix(&rest, kPythonTag);
  rest = absl::StripAsciiWhitespace(rest);
  if (!absl::StartsWith(rest, "{")) return {text, {}};
  ToolCallReading reading;
  // Several calls are ';'-separated: the ';'s outside their strings and
  // brackets; a ';' after the last call may end the answer.
  JsonNesting nesting;
  size_t start = 0;
  for (size_t i = 0; i <= rest.size(); ++i) {
    if (i < rest.size() && !(rest[i] == ';' && nesting.at_top())) {
      nesting.Take(rest[i]);
      continue;
    }
    const absl::string_view piece = rest.substr(start, i - start);
    start = i + 1;
    if (i == rest.size() && !reading.calls.empty() && absl::StripAsciiWhitespace(piece).empty()) break;
    ParsedToolCall call;
    if (!ReadCall(piece, {"parameters", "arguments"}, tool_names, &call)) return {text, {}};
    reading.calls.push_back(std::move(call));
  }
  return reading;
}

}  // namespace

absl::StatusOr<ToolCallFormat> ParseToolCallFormat(const std::string& name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  return absl::InvalidArgumentError(
      absl::StrCat("--tool_call_parser: '", name, "' is not one of hermes, llama3_json"));
}

ToolCallReading ReadToolCalls(ToolCallFormat format, const std::string& text,
                              const std::vector<std::string>& tool_names) {
  return format == ToolCallFormat::kHermes ? ReadHermes(text, tool_names) : ReadLlama3Json(text, tool_names);
}

size_t ContentBeforeAnyCall(ToolCallFormat format, const std::string& text, size_t from) {
  if (format == ToolCallFormat::kHermes) {
    const size_t open = text.find(kHermesOpen, std::min(from, text.size()));
    if (open != std::string::npos) return open;
    // Hold back an end that may be the start of "<tool_call>".
    for (size_t keep = std::min(text.size(), kHermesOpenSize - 1); keep > 0; --keep) {
      if (absl::EndsWith(text, absl::string_view(kHermesOpen, keep))) return text.size() - keep;
    }
    return text.size();
  }
  // llama3_json: a call is the whole answer, so nothing is content until its
  // first visible character shows it is not one.
  const absl::string_view visible = absl::StripLeadingAsciiWhitespace(text);
  if (visible.empty() || absl::StartsWith(visible, "{") ||
      absl::StartsWith(kPythonTag, visible.substr(0, kPythonTagSize))) {  // the tag, or the start of it
    return 0;
  }
  return text.size();
}

std::string ToolCallStream::Add(const std::string& piece) {
  answer_ += piece;
  const size_t safe = ContentBeforeAnyCall(format_, answer_, released_);
  if (safe <= released_) return "";
  std::string out = answer_.substr(released_, safe - released_);
  released_ = safe;
  return out;
}

ToolCallReading ToolCallStream::Finish() {
  ToolCallReading reading = ReadToolCalls(format_, answer_, tool_names_);
  // The content is a prefix of the answer, of which released_ bytes are out.
  reading.content = reading.content.size() > released_ ? reading.content.substr(released_) : "";
  released_ = answer_.size();
  return reading;
}

}  // namespace dslaunch::runtime

#include "launcher/hostfile.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/bounded_file.h"
#include "launcher/launch_limits.h"

namespace dslaunch {
namespace {

constexpr absl::string_view kExpected = "expected 'HOST slots=N'";

// A 4 MiB file of bad lines would otherwise make a message of megabytes.
constexpr size_t kMaxProblemsListed = 20;

// Letters, digits, '.', '-', '_': DNS names and IPv4 addresses. ':' is refused
// so that "host:slot" in --include/--exclude stays unambiguous.
bool IsValidHostName(absl::string_view host) {
  if (host.empty()) return false;
  for (char c : host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
      return false;
    }
  }
  return true;
}

// A positive int written with digits only: SimpleAtoi alone would also take
// "+4" and " 4", which a hostfile should not contain. Values past INT_MAX
// saturate, so that the caller's upper bound names them.
bool ParsePositiveInt(absl::string_view text, int* value) {
  if (text.empty()) return false;
  int64_t result = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    result = std::min<int64_t>(result * 10 + (c - '0'), INT_MAX);
  }
  if (result < 1) return false;
  *value = static_cast<int>(result);
  return true;
}

}  // namespace

absl::StatusOr<Hostfile> ParseHostfile(std::string_view content_view, const std::string& path) {
  // The system Abseil is built with its own string_view, distinct from std::string_view.
  absl::string_view content(content_view.data(), content_view.size());
  Hostfile hostfile;
  hostfile.path = path;
  std::vector<std::string> problems;
  std::map<std::string, int, std::less<>> first_line;  // host -> line of its first valid entry
  int64_t total_slots = 0;

  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(content, '\n')) {
    ++line_number;
    absl::string_view line = absl::StripAsciiWhitespace(raw);  // also drops a CRLF's '\r'
    absl::string_view body = line.substr(0, line.find('#'));
    std::vector<absl::string_view> fields = absl::StrSplit(body, absl::ByAnyChar(" \t\r\v\f"),
                                                          absl::SkipEmpty());
    if (fields.empty()) continue;  // blank or comment-only

    // Every message carries path:line and the line itself (DeepSpeed #3669
    // printed a literal "{line}" instead), escaped so control bytes stay visible.
    auto problem = [&](absl::string_view what) {
      problems.push_back(absl::StrCat(path, ":", line_number, ": '", absl::CHexEscape(line),
                                      "': ", what));
    };

    absl::string_view host = fields[0];
    if (!IsValidHostName(host)) {
      problem(absl::StrCat("bad host name '", absl::CHexEscape(host),
                           "' (letters, digits, '.', '-', '_' only); ", kExpected));
      continue;
    }
    if (fields.size() == 1) {
      problem(absl::StrCat("host '", host, "' has no slots; ", kExpected));
      continue;
    }
    if (fields.size() > 2 || !absl::StartsWith(fields[1], "slots=")) {
      problem(kExpected);
      continue;
    }
    absl::string_view count_text = fields[1].substr(absl::string_view("slots=").size());
    int slots = 0;
    if (!ParsePositiveInt(count_text, &slots)) {
      problem(absl::StrCat("slots must be a positive integer, got '", absl::CHexEscape(count_text),
                           "'"));
      continue;
    }
    if (slots > kMaxSlotsPerHost) {
      problem(absl::StrCat("slots=", count_text, " is more than ", kMaxSlotsPerHost,
                           ", the most one host may have"));
      continue;
    }
    auto [it, inserted] = first_line.emplace(std::string(host), line_number);
    if (!inserted) {
      problem(absl::StrCat("duplicate host '", host, "' (first on line ", it->second, ")"));
      continue;
    }
    if (hostfile.hosts.size() == static_cast<size_t>(kMaxHosts)) {
      problem(absl::StrCat("more than ", kMaxHosts, " hosts, the most a hostfile may list"));
      break;
    }
    total_slots += slots;
    if (total_slots > kMaxHostfileSlots) {
      problem(absl::StrCat("more than ", kMaxHostfileSlots,
                           " slots in all, the most a hostfile may hold"));
      break;
    }
    hostfile.hosts.push_back(HostfileEntry{std::string(host), slots, line_number});
  }

  if (problems.empty() && hostfile.hosts.empty()) {
    problems.push_back(absl::StrCat(path, ": no host in file; ", kExpected, " lines"));
  }
  if (problems.size() > kMaxProblemsListed) {
    const size_t more = problems.size() - kMaxProblemsListed;
    problems.resize(kMaxProblemsListed);
    problems.push_back(absl::StrCat(path, ": ", more, " more bad line(s) not shown"));
  }
  if (!problems.empty()) return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  return hostfile;
}

absl::StatusOr<Hostfile> ReadHostfile(const std::string& path) {
  // Note [Bounded input files]: a FIFO, a device or a directory is refused by
  // name, a file past the limit by its size. A missing file is never replaced
  // by localhost (DeepSpeed #5221): the caller decides, knowing the user asked
  // for it.
  absl::StatusOr<std::string> content = ReadConfigFile(path, "hostfile");
  if (!content.ok()) return content.status();
  return ParseHostfile(*content, path);
}

}  // namespace dslaunch

#include "launcher/hostfile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace dslaunch {
namespace {

constexpr absl::string_view kExpected = "expected 'HOST slots=N'";

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
// "+4" and " 4", which a hostfile should not contain.
bool ParsePositiveInt(absl::string_view text, int* value) {
  if (text.empty() || text.size() > 9) return false;  // 9 digits always fit in an int
  int result = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    result = result * 10 + (c - '0');
  }
  if (result < 1) return false;
  *value = result;
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
    auto [it, inserted] = first_line.emplace(std::string(host), line_number);
    if (!inserted) {
      problem(absl::StrCat("duplicate host '", host, "' (first on line ", it->second, ")"));
      continue;
    }
    hostfile.hosts.push_back(HostfileEntry{std::string(host), slots, line_number});
  }

  if (problems.empty() && hostfile.hosts.empty()) {
    problems.push_back(absl::StrCat(path, ": no host in file; ", kExpected, " lines"));
  }
  if (!problems.empty()) return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  return hostfile;
}

absl::StatusOr<Hostfile> ReadHostfile(const std::string& path) {
  // Plain POSIX I/O so that the error says why (ENOENT, EACCES, EISDIR), which
  // a std::ifstream would hide. A missing file is never replaced by localhost
  // (DeepSpeed #5221): the caller decides, knowing the user asked for it.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat("hostfile '", path, "'"));
  struct stat info {};
  if (::fstat(fd, &info) == 0 && S_ISDIR(info.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("hostfile '", path, "' is a directory"));
  }
  std::string content;
  char buffer[8192];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status status = ErrnoStatus(absl::StrCat("read hostfile '", path, "'"));
      ::close(fd);
      return status;
    }
    if (n == 0) break;
    content.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return ParseHostfile(content, path);
}

}  // namespace dslaunch

#include "runtime/data/text_corpus.h"

#include <dirent.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {
namespace {

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// strfile(1) writes `name.dat` (a binary offset table) beside a fortune
// database, and Debian adds `name.u8` links to the same text.
bool IsFortuneCompanion(absl::string_view path) {
  return absl::EndsWith(path, ".dat") || absl::EndsWith(path, ".u8");
}

bool IsGlob(absl::string_view input) { return input.find_first_of("*?[") != absl::string_view::npos; }

absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern) {
  glob_t matches;
  int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  if (rc == GLOB_NOMATCH) {
    return absl::NotFoundError(absl::StrCat("input pattern ", pattern, " matches no file"));
  }
  if (rc != 0) {
    ::globfree(&matches);
    return absl::InternalError(absl::StrCat("cannot expand input pattern ", pattern,
                                            rc == GLOB_NOSPACE ? ": out of memory" : ": read error"));
  }
  std::vector<std::string> paths(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  ::globfree(&matches);
  return paths;  // glob(3) sorts unless GLOB_NOSORT
}

absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) {
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot list input directory ", dir));
  }
  std::vector<std::string> paths;
  while (struct dirent* entry = ::readdir(handle)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    paths.push_back(absl::StrCat(dir, absl::EndsWith(dir, "/") ? "" : "/", name));
  }
  ::closedir(handle);
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandInputPaths(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  std::set<std::string> seen;
  auto add = [&](const std::string& path) {
    if (seen.insert(path).second) files.push_back(path);
  };
  for (const std::string& input : inputs) {
    if (IsRegularFile(input)) {
      add(input);
      continue;
    }
    std::vector<std::string> candidates;
    if (IsDirectory(input)) {
      DS_ASSIGN_OR_RETURN(candidates, ListDirectory(input));
    } else if (IsGlob(input)) {
      DS_ASSIGN_OR_RETURN(candidates, Glob(input));
    } else {
      return absl::NotFoundError(absl::StrCat("input ", input, " does not exist"));
    }
    int eligible = 0;
    for (const std::string& path : candidates) {
      if (!IsRegularFile(path) || IsFortuneCompanion(path)) continue;
      ++eligible;
      add(path);
    }
    if (eligible == 0) {
      return absl::NotFoundError(absl::StrCat(
          "input ", input, " holds no text file (only directories or .dat/.u8 companions)"));
    }
  }
  return files;
}

std::vector<std::string> SplitOnPercentLines(absl::string_view text) {
  std::vector<std::string> documents;
  std::string current;
  auto finish = [&]() {
    if (!absl::StripAsciiWhitespace(current).empty()) documents.push_back(std::move(current));
    current.clear();
  };
  size_t start = 0;
  while (start < text.size()) {
    size_t newline = text.find('\n', start);
    size_t end = newline == absl::string_view::npos ? text.size() : newline + 1;
    absl::string_view line = text.substr(start, end - start);
    absl::string_view bare = line;
    absl::ConsumeSuffix(&bare, "\n");
    absl::ConsumeSuffix(&bare, "\r");
    if (bare == "%") {
      finish();
    } else {
      current.append(line.data(), line.size());
    }
    start = end;
  }
  finish();
  return documents;
}

absl::StatusOr<std::vector<std::string>> ReadTextDocuments(const std::string& path,
                                                           const TextCorpusOptions& options) {
  DS_ASSIGN_OR_RETURN(std::string text, FileSystem::Default().ReadFile(path));
  if (options.split_on_percent_lines) return SplitOnPercentLines(text);
  std::vector<std::string> documents;
  if (!absl::StripAsciiWhitespace(text).empty()) documents.push_back(std::move(text));
  return documents;
}

}  // namespace dslaunch::runtime

#include "runtime/checkpoint/checkpoint_manifest.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dslaunch::runtime {
namespace {

constexpr char kMagic[] = "dslaunch-checkpoint 1";

}  // namespace

std::string CheckpointManifest::Serialize() const {
  std::string out = absl::StrCat(kMagic, "\ntag ", tag, "\nstep ", step, "\nranks ", ranks, "\n");
  for (const File& file : files) {
    absl::StrAppend(&out, "file ", file.name, " ", file.digest.size, " ", file.digest.HashHex(), "\n");
  }
  absl::StrAppend(&out, "end\n");
  return out;
}

const CheckpointManifest::File* CheckpointManifest::Find(const std::string& name) const {
  for (const File& file : files) {
    if (file.name == name) return &file;
  }
  return nullptr;
}

absl::StatusOr<CheckpointManifest> CheckpointManifest::Parse(const std::string& text, const std::string& path) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  CheckpointManifest manifest;
  if (lines.empty()) return absl::DataLossError(absl::StrCat(path, " is empty"));
  if (lines[0] != kMagic) {
    // Before the record existed COMPLETE held the tag alone.
    // (A line of blanks alone is no tag: the fuzzer found "\v\v\v\v" read as
    // an empty one.)
    const absl::string_view tag = absl::StripAsciiWhitespace(lines[0]);
    if (lines.size() == 1 && !tag.empty() && std::none_of(tag.begin(), tag.end(), absl::ascii_isspace)) {
      manifest.tag = std::string(tag);
      manifest.legacy = true;
      return manifest;
    }
    return absl::DataLossError(absl::StrCat(path, ":1: not a dslaunch checkpoint record"));
  }
  bool ended = false;
  std::set<std::string> listed;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string where = absl::StrCat(path, ":", i + 1, ": ");
    if (ended) return absl::DataLossError(absl::StrCat(where, "text after 'end'"));
    std::vector<std::string> words = absl::StrSplit(lines[i], ' ');
    auto bad = [&](absl::string_view what) { return absl::DataLossError(absl::StrCat(where, what, ": '", lines[i], "'")); };
    if (words[0] == "end" && words.size() == 1) {
      ended = true;
    } else if (words[0] == "tag" && words.size() == 2) {
      manifest.tag = words[1];
    } else if (words[0] == "step" && words.size() == 2) {
      if (!absl::SimpleAtoi(words[1], &manifest.step)) return bad("bad step");
    } else if (words[0] == "ranks" && words.size() == 2) {
      if (!absl::SimpleAtoi(words[1], &manifest.ranks) || manifest.ranks < 1) return bad("bad rank count");
    } else if (words[0] == "file" && words.size() == 4) {
      File file;
      file.name = words[1];
      // A file of the folder itself: VerifyCheckpoint opens folder/name, and
      // a damaged or forged record must not send it elsewhere.
      if (file.name.empty() || file.name == "." || file.name == ".." ||
          file.name.find('/') != std::string::npos) {
        return bad("not a file name of the checkpoint folder");
      }
      if (!listed.insert(file.name).second) return bad("the file is listed twice");
      if (!absl::SimpleAtoi(words[2], &file.digest.size) || file.digest.size < 0 || words[3].size() != 16 ||
          !std::all_of(words[3].begin(), words[3].end(), absl::ascii_isxdigit) ||
          !absl::SimpleHexAtoi(words[3], &file.digest.xxh3)) {
        return bad("bad file entry");
      }
      manifest.files.push_back(std::move(file));
    } else {
      return bad("unknown line");
    }
  }
  if (!ended) return absl::DataLossError(absl::StrCat(path, " is cut short (no 'end' line)"));
  if (manifest.tag.empty() || manifest.ranks < 1) {
    return absl::DataLossError(absl::StrCat(path, " names no tag or rank count"));
  }
  return manifest;
}

}  // namespace dslaunch::runtime

#include "runtime/checkpoint/checkpoint_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "runtime/checkpoint/posix_fs.h"

namespace dslaunch::runtime {
namespace {

constexpr char kCompleteMarker[] = "COMPLETE";
constexpr char kDigestSuffix[] = ".digest";
// `latest` and COMPLETE are small; anything bigger is not ours.
constexpr int64_t kMaxRecordBytes = 1 << 20;

// A small regular file, whole. NotFound when missing; DataLoss when it is
// not a regular file or too big.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxRecordBytes) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, " is not a regular file of at most ", kMaxRecordBytes, " bytes"));
  }
  std::string content(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::read(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status failed = n < 0 ? ErrnoStatus(absl::StrCat("read ", path)) : absl::OkStatus();
      ::close(fd);
      if (!failed.ok()) return failed;
      content.resize(done);
      return content;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return content;
}

std::string CompletePath(const std::string& dir, const std::string& tag) {
  return absl::StrCat(TagDir(dir, tag), "/", kCompleteMarker);
}

// The step a record names; for a legacy record the number a tag ends with
// (global_step20); -1 when neither says.
int64_t StepOf(const CheckpointManifest& manifest) {
  if (manifest.step >= 0) return manifest.step;
  size_t digits = manifest.tag.size();
  while (digits > 0 && absl::ascii_isdigit(manifest.tag[digits - 1])) --digits;
  int64_t step = -1;
  if (digits < manifest.tag.size() && absl::SimpleAtoi(manifest.tag.substr(digits), &step)) return step;
  return -1;
}

struct Committed {
  int64_t step;
  int64_t record_time_ns;
  std::string tag;
  bool operator<(const Committed& other) const {
    return std::tie(step, record_time_ns, tag) < std::tie(other.step, other.record_time_ns, other.tag);
  }
};

std::vector<Committed> ListCommitted(const std::string& dir) {
  std::vector<Committed> found;
  for (const std::string& name : posix_fs::ListDirectory(dir)) {
    if (!CheckTag(name).ok() || !posix_fs::IsDirectory(TagDir(dir, name))) continue;
    const std::string record = CompletePath(dir, name);
    if (!posix_fs::Exists(record)) continue;
    auto manifest = ReadManifest(dir, name);
    Committed committed{-1, posix_fs::ModificationTimeNs(record), name};
    if (manifest.ok()) committed.step = StepOf(*manifest);
    found.push_back(committed);
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

std::string PartialDir(const std::string& dir, const std::string& tag) {
  return absl::StrCat(dir, "/.", tag, ".partial");
}
std::string TagDir(const std::string& dir, const std::string& tag) { return absl::StrCat(dir, "/", tag); }
std::string RankFileName(int rank) { return absl::StrCat("rank_", rank, ".pt"); }
std::string RankFile(const std::string& folder, int rank) { return absl::StrCat(folder, "/", RankFileName(rank)); }

absl::Status CheckTag(const std::string& tag) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint tag '", absl::CHexEscape(tag), "' ", why));
  };
  if (tag.empty()) return bad("is empty");
  if (tag.size() > 200) return bad("is longer than 200 bytes");
  if (tag[0] == '.') return bad("starts with '.' (names outside the checkpoint folder or hidden ones are refused)");
  for (char c : tag) {
    if (c == '/') return bad("has a '/': a tag is one folder inside checkpoint.dir");
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return bad("has a control character");
  }
  return absl::OkStatus();
}

absl::Status PreparePartial(const std::string& dir, const std::string& tag) {
  DS_RETURN_IF_ERROR(CheckTag(tag));
  DS_RETURN_IF_ERROR(posix_fs::MakeDirectories(dir));
  const std::string partial = PartialDir(dir, tag);
  DS_RETURN_IF_ERROR(posix_fs::RemoveTree(partial));
  return posix_fs::MakeDirectories(partial);
}

absl::Status RecordRankFile(const std::string& partial_folder, int rank, const FileDigest& digest) {
  return WriteFileAtomically(absl::StrCat(partial_folder, "/", RankFileName(rank), kDigestSuffix),
                             absl::StrCat(digest.size, " ", digest.HashHex(), "\n"));
}

absl::Status RemovePartial(const std::string& dir, const std::string& tag) {
  return posix_fs::RemoveTree(PartialDir(dir, tag));
}

absl::Status CommitCheckpoint(const std::string& dir, const std::string& tag, int64_t step, int ranks, int keep) {
  const std::string partial = PartialDir(dir, tag);
  // Until the rename, a failure leaves nothing behind.
  absl::Status recorded = [&]() -> absl::Status {
    CheckpointManifest manifest;
    manifest.tag = tag;
    manifest.step = step;
    manifest.ranks = ranks;
    for (int r = 0; r < ranks; ++r) {
      const std::string digest_path = absl::StrCat(partial, "/", RankFileName(r), kDigestSuffix);
      auto text = ReadSmallFile(digest_path);
      if (!text.ok()) {
        return absl::DataLossError(absl::StrCat("commit ", tag, ": rank ", r, " recorded no file: ", text.status().message()));
      }
      std::vector<std::string> words = absl::StrSplit(absl::StripAsciiWhitespace(*text), ' ');
      CheckpointManifest::File file{RankFileName(r), {}};
      if (words.size() != 2 || !absl::SimpleAtoi(words[0], &file.digest.size) ||
          !absl::SimpleHexAtoi(words[1], &file.digest.xxh3)) {
        return absl::DataLossError(absl::StrCat("commit ", tag, ": ", digest_path, " is malformed"));
      }
      manifest.files.push_back(file);
    }
    // Whatever else the ranks put into the folder (ZeRO-3's gathered weights).
    std::vector<std::string> names = posix_fs::ListDirectory(partial);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      if (manifest.Find(name) != nullptr || name == kCompleteMarker || absl::EndsWith(name, kDigestSuffix)) continue;
      DS_ASSIGN_OR_RETURN(FileDigest digest, DigestFile(absl::StrCat(partial, "/", name)));
      manifest.files.push_back({name, digest});
    }
    DS_RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(partial, "/", kCompleteMarker), manifest.Serialize()));
    for (int r = 0; r < ranks; ++r) {
      DS_RETURN_IF_ERROR(posix_fs::RemoveTree(absl::StrCat(partial, "/", RankFileName(r), kDigestSuffix)));
    }
    return SyncPath(partial);
  }();
  if (!recorded.ok()) {
    (void)posix_fs::RemoveTree(partial);
    return recorded;
  }
  const std::string final_dir = TagDir(dir, tag);
  if (posix_fs::Exists(final_dir)) {
    // Saving a tag again: move the old one aside first, so a crash leaves
    // either the old or the new complete folder under a name we recognise.
    const std::string old_dir = absl::StrCat(dir, "/.", tag, ".old");
    DS_RETURN_IF_ERROR(posix_fs::RemoveTree(old_dir));
    DS_RETURN_IF_ERROR(posix_fs::Rename(final_dir, old_dir));
    DS_RETURN_IF_ERROR(posix_fs::Rename(partial, final_dir));
    DS_RETURN_IF_ERROR(posix_fs::RemoveTree(old_dir));
  } else {
    DS_RETURN_IF_ERROR(posix_fs::Rename(partial, final_dir));
  }
  DS_RETURN_IF_ERROR(SyncPath(dir));
  DS_RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(dir, "/latest"), tag + "\n"));

  if (keep > 0) {
    // Only checkpoints of earlier steps go: one of a later step (a run that
    // did not resume from it) is never ours to delete.
    std::vector<Committed> older;
    for (const Committed& committed : ListCommitted(dir)) {
      if (committed.tag != tag && committed.step >= 0 && committed.step < step) older.push_back(committed);
    }
    const size_t keep_older = static_cast<size_t>(keep - 1);
    for (size_t i = 0; i + keep_older < older.size(); ++i) {
      DS_RETURN_IF_ERROR(posix_fs::RemoveTree(TagDir(dir, older[i].tag)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadLatestTag(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/latest");
  auto text = ReadSmallFile(path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(absl::StrCat("no committed checkpoint in ", dir, " (no 'latest')"));
    }
    return absl::DataLossError(absl::StrCat(path, " is unreadable: ", text.status().message()));
  }
  const std::string tag(absl::StripAsciiWhitespace(*text));
  if (tag.empty()) return absl::DataLossError(absl::StrCat(path, " is empty"));
  if (absl::Status valid = CheckTag(tag); !valid.ok()) {
    return absl::DataLossError(absl::StrCat(path, " does not name a checkpoint in ", dir, ": ", valid.message()));
  }
  if (!posix_fs::IsDirectory(TagDir(dir, tag))) {
    return absl::DataLossError(absl::StrCat(path, " names '", tag, "', which is not a folder in ", dir));
  }
  if (!posix_fs::Exists(CompletePath(dir, tag))) {
    return absl::DataLossError(absl::StrCat(path, " names '", tag, "', which has no commit record (", kCompleteMarker,
                                            "): it was never committed, or the record was deleted"));
  }
  return tag;
}

absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir, const std::string& tag) {
  DS_RETURN_IF_ERROR(CheckTag(tag));
  const std::string path = CompletePath(dir, tag);
  auto text = ReadSmallFile(path);
  if (!text.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", TagDir(dir, tag), " has no readable commit record: ",
                                            text.status().message()));
  }
  return CheckpointManifest::Parse(*text, path);
}

absl::StatusOr<CheckpointManifest> VerifyCheckpoint(const std::string& dir, const std::string& tag) {
  const std::string folder = TagDir(dir, tag);
  if (!posix_fs::IsDirectory(folder)) return absl::DataLossError(absl::StrCat(folder, " is not a folder"));
  DS_ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadManifest(dir, tag));
  if (manifest.legacy) {
    if (!posix_fs::Exists(RankFile(folder, 0))) {
      return absl::DataLossError(absl::StrCat(folder, ": ", RankFileName(0), " is missing"));
    }
    return manifest;
  }
  for (int r = 0; r < manifest.ranks; ++r) {
    if (manifest.Find(RankFileName(r)) == nullptr) {
      return absl::DataLossError(absl::StrCat(folder, ": the commit record lists no ", RankFileName(r), " although ",
                                              manifest.ranks, " rank(s) saved it"));
    }
  }
  for (const CheckpointManifest::File& file : manifest.files) {
    const std::string path = absl::StrCat(folder, "/", file.name);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return absl::DataLossError(absl::StrCat(folder, ": ", file.name, " is missing"));
    }
    if (!S_ISREG(st.st_mode) || st.st_size != file.digest.size) {
      return absl::DataLossError(absl::StrCat(folder, ": ", file.name, " has ", static_cast<int64_t>(st.st_size),
                                              " bytes, its commit record says ", file.digest.size));
    }
    auto digest = DigestFile(path);
    if (!digest.ok()) return absl::DataLossError(absl::StrCat(folder, ": ", digest.status().message()));
    if (!(*digest == file.digest)) {
      return absl::DataLossError(absl::StrCat(folder, ": ", file.name, " does not match its checksum (xxh3 ",
                                              digest->HashHex(), ", recorded ", file.digest.HashHex(),
                                              "): it changed after it was written"));
    }
  }
  return manifest;
}

std::vector<std::string> CommittedTags(const std::string& dir) {
  std::vector<std::string> tags;
  for (const Committed& committed : ListCommitted(dir)) tags.push_back(committed.tag);
  return tags;
}

ResumeChoice ChooseResumeCheckpoint(const std::string& dir, const std::string& preferred) {
  ResumeChoice choice;
  std::vector<std::string> candidates;
  int64_t newest_step = -1;  // with a preferred tag: nothing newer than it
  if (!preferred.empty()) {
    candidates.push_back(preferred);
    if (auto manifest = ReadManifest(dir, preferred); manifest.ok()) newest_step = StepOf(*manifest);
  } else if (auto latest = ReadLatestTag(dir); latest.ok()) {
    candidates.push_back(*latest);
  } else if (!absl::IsNotFound(latest.status())) {
    choice.notes.push_back(absl::StrCat(latest.status().message(), "; looking for the newest checkpoint that verifies"));
  }
  std::vector<Committed> committed = ListCommitted(dir);
  if (candidates.empty() && choice.notes.empty() && !committed.empty()) {
    choice.notes.push_back(absl::StrCat("no 'latest' in ", dir, ", though it holds ", committed.size(),
                                        " committed checkpoint(s); looking for the newest that verifies"));
  }
  for (auto it = committed.rbegin(); it != committed.rend(); ++it) {
    if (std::find(candidates.begin(), candidates.end(), it->tag) != candidates.end()) continue;
    if (newest_step >= 0 && it->step > newest_step) continue;
    candidates.push_back(it->tag);
  }
  for (const std::string& tag : candidates) {
    auto verified = VerifyCheckpoint(dir, tag);
    if (verified.ok()) {
      choice.tag = tag;
      choice.legacy = verified->legacy;
      if (verified->legacy) {
        choice.notes.push_back(absl::StrCat("checkpoint ", TagDir(dir, tag),
                                            " was written before commit records had checksums: loaded unverified"));
      }
      return choice;
    }
    ++choice.skipped;
    choice.notes.push_back(absl::StrCat("checkpoint skipped: ", verified.status().message()));
  }
  return choice;
}

}  // namespace dslaunch::runtime

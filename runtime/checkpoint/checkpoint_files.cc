#include "runtime/checkpoint/checkpoint_files.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {
namespace {

constexpr char kCompleteMarker[] = "COMPLETE";
constexpr char kDigestSuffix[] = ".digest";
// `latest` and COMPLETE are small; anything bigger is not ours.
constexpr int64_t kMaxRecordBytes = 1 << 20;

// A small regular file, whole. NotFound when missing; DataLoss when it is
// not a regular file or too big.
absl::StatusOr<std::string> ReadSmallFile(FileSystem& fs, const std::string& path) {
  absl::StatusOr<std::string> content = fs.ReadFile(path, kMaxRecordBytes);
  if (absl::IsFailedPrecondition(content.status())) {
    return absl::DataLossError(absl::StrCat(path, " is not a regular file of at most ", kMaxRecordBytes, " bytes"));
  }
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

std::vector<Committed> ListCommitted(FileSystem& fs, const std::string& dir) {
  std::vector<Committed> found;
  absl::StatusOr<std::vector<std::string>> names = fs.ListDirectory(dir);
  if (!names.ok()) return found;  // no folder yet: nothing committed
  for (const std::string& name : *names) {
    if (!CheckTag(name).ok() || !fs.IsDirectory(TagDir(dir, name))) continue;
    const std::string record = CompletePath(dir, name);
    absl::StatusOr<FileInfo> record_info = fs.Stat(record);
    if (!record_info.ok()) continue;
    auto manifest = ReadManifest(fs, dir, name);
    Committed committed{-1, record_info->modification_time_ns, name};
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
std::string OldDir(const std::string& dir, const std::string& tag) { return absl::StrCat(dir, "/.", tag, ".old"); }
std::string RankFileName(int rank) { return absl::StrCat("rank_", rank, ".pt"); }
std::string RankFile(const std::string& folder, int rank) { return absl::StrCat(folder, "/", RankFileName(rank)); }

absl::Status CheckTag(const std::string& tag) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint tag '", absl::CHexEscape(tag), "' ", why));
  };
  if (tag.empty()) return bad("is empty");
  if (tag.size() > 200) return bad("is longer than 200 bytes");
  if (tag[0] == '.') return bad("starts with '.' (names outside the checkpoint folder or hidden ones are refused)");
  if (tag == "latest" || tag == "latest.tmp") return bad("is the name of the checkpoint folder's pointer file");
  for (char c : tag) {
    if (c == '/') return bad("has a '/': a tag is one folder inside checkpoint.dir");
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return bad("has a control character");
  }
  return absl::OkStatus();
}

absl::Status PreparePartial(FileSystem& fs, const std::string& dir, const std::string& tag) {
  DS_RETURN_IF_ERROR(CheckTag(tag));
  DS_RETURN_IF_ERROR(fs.CreateDirectories(dir));
  const std::string partial = PartialDir(dir, tag);
  DS_RETURN_IF_ERROR(fs.RemoveTree(partial));
  return fs.CreateDirectories(partial);
}

absl::Status RecordRankFile(FileSystem& fs, const std::string& partial_folder, int rank, const FileDigest& digest) {
  return WriteFileAtomically(fs, absl::StrCat(partial_folder, "/", RankFileName(rank), kDigestSuffix),
                             absl::StrCat(digest.size, " ", digest.HashHex(), "\n"));
}

absl::Status RemovePartial(FileSystem& fs, const std::string& dir, const std::string& tag) {
  return fs.RemoveTree(PartialDir(dir, tag));
}

absl::Status CommitCheckpoint(FileSystem& fs, const std::string& dir, const std::string& tag, int64_t step, int ranks) {
  const std::string partial = PartialDir(dir, tag);
  // Until the rename, a failure leaves nothing behind.
  absl::Status recorded = [&]() -> absl::Status {
    CheckpointManifest manifest;
    manifest.tag = tag;
    manifest.step = step;
    manifest.ranks = ranks;
    for (int r = 0; r < ranks; ++r) {
      const std::string digest_path = absl::StrCat(partial, "/", RankFileName(r), kDigestSuffix);
      auto text = ReadSmallFile(fs, digest_path);
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
    DS_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.ListDirectory(partial));
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      if (manifest.Find(name) != nullptr || name == kCompleteMarker || absl::EndsWith(name, kDigestSuffix)) continue;
      DS_ASSIGN_OR_RETURN(FileDigest digest, DigestFile(fs, absl::StrCat(partial, "/", name)));
      manifest.files.push_back({name, digest});
    }
    DS_RETURN_IF_ERROR(WriteFileAtomically(fs, absl::StrCat(partial, "/", kCompleteMarker), manifest.Serialize()));
    for (int r = 0; r < ranks; ++r) {
      DS_RETURN_IF_ERROR(fs.RemoveFile(absl::StrCat(partial, "/", RankFileName(r), kDigestSuffix)));
    }
    return fs.SyncDirectory(partial);
  }();
  if (!recorded.ok()) {
    (void)fs.RemoveTree(partial);
    return recorded;
  }
  const std::string final_dir = TagDir(dir, tag);
  absl::Status renamed = [&]() -> absl::Status {
    if (!fs.Exists(final_dir)) return fs.Rename(partial, final_dir);
    // Saving a tag again (Note [Replacing a tag]): the old one aside first.
    const std::string old_dir = OldDir(dir, tag);
    DS_RETURN_IF_ERROR(fs.RemoveTree(old_dir));
    DS_RETURN_IF_ERROR(fs.Rename(final_dir, old_dir));
    if (absl::Status moved = fs.Rename(partial, final_dir); !moved.ok()) {
      (void)fs.Rename(old_dir, final_dir);  // the old one back where `latest` may name it
      return moved;
    }
    // The new folder's name is durable before the old one goes.
    DS_RETURN_IF_ERROR(fs.SyncDirectory(dir));
    return fs.RemoveTree(old_dir);
  }();
  if (!renamed.ok()) {
    // A failed rename leaves no partial folder either.
    (void)fs.RemoveTree(partial);
    return renamed;
  }
  DS_RETURN_IF_ERROR(fs.SyncDirectory(dir));
  return WriteFileAtomically(fs, absl::StrCat(dir, "/latest"), tag + "\n");
}

absl::Status RotateCheckpoints(FileSystem& fs, const std::string& dir, const std::string& tag, int64_t step, int keep) {
  if (keep <= 0) return absl::OkStatus();
  // Only checkpoints of earlier steps go: one of a later step (a run that
  // did not resume from it) is never ours to delete.
  std::vector<Committed> older;
  for (const Committed& committed : ListCommitted(fs, dir)) {
    if (committed.tag != tag && committed.step >= 0 && committed.step < step) older.push_back(committed);
  }
  const size_t keep_older = static_cast<size_t>(keep - 1);
  for (size_t i = 0; i + keep_older < older.size(); ++i) {
    // The commit record goes first, and durably: a deletion cut short
    // leaves a folder that is not a committed checkpoint, never one whose
    // record outlived its files (a resume would take it for the controller's
    // and skip the newer ones).
    const std::string folder = TagDir(dir, older[i].tag);
    DS_RETURN_IF_ERROR(fs.RemoveFile(CompletePath(dir, older[i].tag)));
    DS_RETURN_IF_ERROR(fs.SyncDirectory(folder));
    DS_RETURN_IF_ERROR(fs.RemoveTree(folder));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RecoverInterruptedReplace(FileSystem& fs, const std::string& dir) {
  std::vector<std::string> notes;
  absl::StatusOr<std::vector<std::string>> names = fs.ListDirectory(dir);
  if (!names.ok()) return notes;  // no folder yet
  for (const std::string& name : *names) {
    // Only what a save set aside: .<tag>.old, a folder with its commit record.
    if (name.size() <= 5 || !absl::StartsWith(name, ".") || !absl::EndsWith(name, ".old")) continue;
    const std::string tag = name.substr(1, name.size() - 5);
    if (!CheckTag(tag).ok()) continue;
    const std::string old_dir = OldDir(dir, tag), final_dir = TagDir(dir, tag), partial = PartialDir(dir, tag);
    if (!fs.IsDirectory(old_dir) || !fs.Exists(absl::StrCat(old_dir, "/", kCompleteMarker))) continue;
    if (fs.Exists(final_dir)) {
      // The replacement finished but for removing the old folder.
      DS_RETURN_IF_ERROR(fs.RemoveTree(old_dir));
      continue;
    }
    if (fs.Exists(absl::StrCat(partial, "/", kCompleteMarker))) {
      DS_RETURN_IF_ERROR(fs.Rename(partial, final_dir));
      DS_RETURN_IF_ERROR(fs.SyncDirectory(dir));
      DS_RETURN_IF_ERROR(fs.RemoveTree(old_dir));
      notes.push_back(absl::StrCat("a save of ", final_dir, " was cut short between moving the old folder aside and "
                                   "putting the new, committed one in place: the new one is put in place"));
    } else {
      DS_RETURN_IF_ERROR(fs.Rename(old_dir, final_dir));
      DS_RETURN_IF_ERROR(fs.SyncDirectory(dir));
      notes.push_back(absl::StrCat("a save of ", final_dir, " was cut short after moving the old folder aside: the "
                                   "old one is put back"));
    }
  }
  return notes;
}

absl::StatusOr<std::string> ReadLatestTag(FileSystem& fs, const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/latest");
  auto text = ReadSmallFile(fs, path);
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
  if (!fs.IsDirectory(TagDir(dir, tag))) {
    return absl::DataLossError(absl::StrCat(path, " names '", tag, "', which is not a folder in ", dir));
  }
  if (!fs.Exists(CompletePath(dir, tag))) {
    return absl::DataLossError(absl::StrCat(path, " names '", tag, "', which has no commit record (", kCompleteMarker,
                                            "): it was never committed, or the record was deleted"));
  }
  return tag;
}

absl::StatusOr<CheckpointManifest> ReadManifest(FileSystem& fs, const std::string& dir, const std::string& tag) {
  DS_RETURN_IF_ERROR(CheckTag(tag));
  const std::string path = CompletePath(dir, tag);
  auto text = ReadSmallFile(fs, path);
  if (!text.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", TagDir(dir, tag), " has no readable commit record: ",
                                            text.status().message()));
  }
  return CheckpointManifest::Parse(*text, path);
}

absl::StatusOr<CheckpointManifest> VerifyCheckpoint(FileSystem& fs, const std::string& dir, const std::string& tag) {
  return VerifyCheckpointShare(fs, dir, tag, 0, 1);
}

absl::StatusOr<CheckpointManifest> VerifyCheckpointShare(FileSystem& fs, const std::string& dir,
                                                         const std::string& tag, int share, int shares) {
  const std::string folder = TagDir(dir, tag);
  if (!fs.IsDirectory(folder)) return absl::DataLossError(absl::StrCat(folder, " is not a folder"));
  DS_ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadManifest(fs, dir, tag));
  if (manifest.legacy) {
    if (!fs.Exists(RankFile(folder, 0))) {
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
  for (size_t i = static_cast<size_t>(share); i < manifest.files.size(); i += static_cast<size_t>(shares)) {
    const CheckpointManifest::File& file = manifest.files[i];
    const std::string path = absl::StrCat(folder, "/", file.name);
    absl::StatusOr<FileInfo> info = fs.Stat(path);
    if (!info.ok()) {
      return absl::DataLossError(absl::StrCat(folder, ": ", file.name, " is missing"));
    }
    if (info->type != FileType::kRegular || info->size != file.digest.size) {
      return absl::DataLossError(absl::StrCat(folder, ": ", file.name, " has ", info->size,
                                              " bytes, its commit record says ", file.digest.size));
    }
    auto digest = DigestFile(fs, path);
    if (!digest.ok()) return absl::DataLossError(absl::StrCat(folder, ": ", digest.status().message()));
    if (!(*digest == file.digest)) {
      return absl::DataLossError(absl::StrCat(folder, ": ", file.name, " does not match its checksum (xxh3 ",
                                              digest->HashHex(), ", recorded ", file.digest.HashHex(),
                                              "): it changed after it was written"));
    }
  }
  return manifest;
}

std::vector<std::string> CommittedTags(FileSystem& fs, const std::string& dir) {
  std::vector<std::string> tags;
  for (const Committed& committed : ListCommitted(fs, dir)) tags.push_back(committed.tag);
  return tags;
}

std::vector<std::string> ResumeCandidates(FileSystem& fs, const std::string& dir, const std::string& preferred,
                                          std::vector<std::string>* notes) {
  std::vector<std::string> candidates;
  int64_t newest_step = -1;  // with a preferred tag: nothing newer than it
  if (!preferred.empty()) {
    candidates.push_back(preferred);
    if (auto manifest = ReadManifest(fs, dir, preferred); manifest.ok()) newest_step = StepOf(*manifest);
  } else if (auto latest = ReadLatestTag(fs, dir); latest.ok()) {
    candidates.push_back(*latest);
  } else if (!absl::IsNotFound(latest.status())) {
    notes->push_back(absl::StrCat(latest.status().message(), "; looking for the newest checkpoint that verifies"));
  }
  std::vector<Committed> committed = ListCommitted(fs, dir);
  if (candidates.empty() && notes->empty() && !committed.empty()) {
    notes->push_back(absl::StrCat("no 'latest' in ", dir, ", though it holds ", committed.size(),
                                        " committed checkpoint(s); looking for the newest that verifies"));
  }
  for (auto it = committed.rbegin(); it != committed.rend(); ++it) {
    if (std::find(candidates.begin(), candidates.end(), it->tag) != candidates.end()) continue;
    if (newest_step >= 0 && it->step > newest_step) continue;
    candidates.push_back(it->tag);
  }
  return candidates;
}

ResumeChoice ChooseResumeCheckpoint(FileSystem& fs, const std::string& dir, const std::string& preferred) {
  ResumeChoice choice;
  for (const std::string& tag : ResumeCandidates(fs, dir, preferred, &choice.notes)) {
    auto verified = VerifyCheckpoint(fs, dir, tag);
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

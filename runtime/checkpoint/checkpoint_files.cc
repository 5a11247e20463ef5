#include "runtime/checkpoint/checkpoint_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "runtime/checkpoint/posix_fs.h"

namespace dslaunch::runtime {
namespace {

constexpr char kCompleteMarker[] = "COMPLETE";

absl::Status SyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open ", path));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus(absl::StrCat("fsync ", path), err);
  return absl::OkStatus();
}

absl::Status WriteFileSynced(const std::string& path, const std::string& content) {
  {
    std::ofstream out(path, std::ios::trunc);
    out << content;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return SyncPath(path, O_RDONLY);
}

}  // namespace

std::string PartialDir(const std::string& dir, const std::string& tag) {
  return absl::StrCat(dir, "/.", tag, ".partial");
}
std::string TagDir(const std::string& dir, const std::string& tag) {
  return absl::StrCat(dir, "/", tag);
}
std::string RankFile(const std::string& folder, int rank) {
  return absl::StrCat(folder, "/rank_", rank, ".pt");
}

absl::Status PreparePartial(const std::string& dir, const std::string& tag) {
  DS_RETURN_IF_ERROR(posix_fs::MakeDirectories(dir));
  const std::string partial = PartialDir(dir, tag);
  DS_RETURN_IF_ERROR(posix_fs::RemoveTree(partial));
  return posix_fs::MakeDirectories(partial);
}

absl::Status SyncFile(const std::string& path) { return SyncPath(path, O_RDONLY); }

absl::Status CommitCheckpoint(const std::string& dir, const std::string& tag, int keep) {
  const std::string partial = PartialDir(dir, tag);
  DS_RETURN_IF_ERROR(WriteFileSynced(absl::StrCat(partial, "/", kCompleteMarker), tag + "\n"));
  DS_RETURN_IF_ERROR(SyncPath(partial, O_RDONLY | O_DIRECTORY));
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
  DS_RETURN_IF_ERROR(SyncPath(dir, O_RDONLY | O_DIRECTORY));
  const std::string latest_tmp = absl::StrCat(dir, "/.latest.tmp");
  DS_RETURN_IF_ERROR(WriteFileSynced(latest_tmp, tag + "\n"));
  DS_RETURN_IF_ERROR(posix_fs::Rename(latest_tmp, absl::StrCat(dir, "/latest")));
  DS_RETURN_IF_ERROR(SyncPath(dir, O_RDONLY | O_DIRECTORY));

  if (keep > 0) {
    std::vector<std::string> tags = CommittedTags(dir);
    for (size_t i = 0; i + keep < tags.size(); ++i) {
      if (tags[i] == tag) continue;
      DS_RETURN_IF_ERROR(posix_fs::RemoveTree(TagDir(dir, tags[i])));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadLatestTag(const std::string& dir) {
  std::ifstream in(absl::StrCat(dir, "/latest"));
  std::string line;
  if (!in || !std::getline(in, line)) {
    return absl::NotFoundError(absl::StrCat("no committed checkpoint in ", dir, " (no 'latest')"));
  }
  std::string tag(absl::StripAsciiWhitespace(line));
  if (!posix_fs::Exists(absl::StrCat(TagDir(dir, tag), "/", kCompleteMarker))) {
    return absl::DataLossError(absl::StrCat(dir, "/latest names '", tag,
                                            "', which is not a complete checkpoint"));
  }
  return tag;
}

std::vector<std::string> CommittedTags(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::string& name : posix_fs::ListDirectory(dir)) {
    if (name.empty() || name[0] == '.' || !posix_fs::IsDirectory(TagDir(dir, name))) continue;
    const std::string marker = absl::StrCat(TagDir(dir, name), "/", kCompleteMarker);
    if (!posix_fs::Exists(marker)) continue;
    found.emplace_back(posix_fs::ModificationTimeNs(marker), name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> tags;
  for (auto& [time, name] : found) tags.push_back(name);
  return tags;
}

}  // namespace dslaunch::runtime

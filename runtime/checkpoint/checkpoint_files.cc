#include "runtime/checkpoint/checkpoint_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {
namespace fs = std::filesystem;
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
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  const std::string partial = PartialDir(dir, tag);
  fs::remove_all(partial, error);
  fs::create_directories(partial, error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot create ", partial, ": ", error.message()));
  }
  return absl::OkStatus();
}

absl::Status SyncFile(const std::string& path) { return SyncPath(path, O_RDONLY); }

absl::Status CommitCheckpoint(const std::string& dir, const std::string& tag, int keep) {
  const std::string partial = PartialDir(dir, tag);
  DS_RETURN_IF_ERROR(WriteFileSynced(absl::StrCat(partial, "/", kCompleteMarker), tag + "\n"));
  DS_RETURN_IF_ERROR(SyncPath(partial, O_RDONLY | O_DIRECTORY));
  const std::string final_dir = TagDir(dir, tag);
  std::error_code error;
  if (fs::exists(final_dir)) {
    // Saving a tag again: move the old one aside first, so a crash leaves
    // either the old or the new complete folder under a name we recognise.
    const std::string old_dir = absl::StrCat(dir, "/.", tag, ".old");
    fs::remove_all(old_dir, error);
    fs::rename(final_dir, old_dir, error);
    if (error) return absl::InternalError(absl::StrCat("rename ", final_dir, ": ", error.message()));
    fs::rename(partial, final_dir, error);
    if (error) return absl::InternalError(absl::StrCat("rename ", partial, ": ", error.message()));
    fs::remove_all(old_dir, error);
  } else {
    fs::rename(partial, final_dir, error);
    if (error) return absl::InternalError(absl::StrCat("rename ", partial, ": ", error.message()));
  }
  DS_RETURN_IF_ERROR(SyncPath(dir, O_RDONLY | O_DIRECTORY));
  const std::string latest_tmp = absl::StrCat(dir, "/.latest.tmp");
  DS_RETURN_IF_ERROR(WriteFileSynced(latest_tmp, tag + "\n"));
  fs::rename(latest_tmp, absl::StrCat(dir, "/latest"), error);
  if (error) return absl::InternalError(absl::StrCat("rename latest: ", error.message()));
  DS_RETURN_IF_ERROR(SyncPath(dir, O_RDONLY | O_DIRECTORY));

  if (keep > 0) {
    std::vector<std::string> tags = CommittedTags(dir);
    for (size_t i = 0; i + keep < tags.size(); ++i) {
      if (tags[i] == tag) continue;
      fs::remove_all(TagDir(dir, tags[i]), error);
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
  if (!fs::exists(absl::StrCat(TagDir(dir, tag), "/", kCompleteMarker))) {
    return absl::DataLossError(absl::StrCat(dir, "/latest names '", tag,
                                            "', which is not a complete checkpoint"));
  }
  return tag;
}

std::vector<std::string> CommittedTags(const std::string& dir) {
  std::vector<std::pair<fs::file_time_type, std::string>> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || !entry.is_directory()) continue;
    fs::path marker = entry.path() / kCompleteMarker;
    if (!fs::exists(marker)) continue;
    found.emplace_back(fs::last_write_time(marker, error), name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> tags;
  for (auto& [time, name] : found) tags.push_back(name);
  return tags;
}

}  // namespace dslaunch::runtime

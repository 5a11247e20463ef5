#include "runtime/fs/file_system.h"

#include "common/status_macros.h"

namespace dslaunch::runtime {

bool FileSystem::Exists(const std::string& path) { return Stat(path).ok(); }

bool FileSystem::IsDirectory(const std::string& path) {
  absl::StatusOr<FileInfo> info = Stat(path);
  return info.ok() && info->type == FileType::kDirectory;
}

absl::Status WriteFileAtomically(FileSystem& fs, const std::string& path, absl::string_view content) {
  const std::string temporary = path + ".tmp";
  absl::Status written = [&]() -> absl::Status {
    DS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, fs.NewWritableFile(temporary));
    DS_RETURN_IF_ERROR(file->Append(content));
    DS_RETURN_IF_ERROR(file->Sync());
    DS_RETURN_IF_ERROR(file->Close());
    return fs.Rename(temporary, path);
  }();
  if (!written.ok()) {
    (void)fs.RemoveFile(temporary);
    return written;
  }
  return fs.SyncDirectory(ParentDirectory(path));
}

}  // namespace dslaunch::runtime

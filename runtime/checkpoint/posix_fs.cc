#include "runtime/checkpoint/posix_fs.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dslaunch::runtime::posix_fs {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::Status MakeDirectories(const std::string& path) {
  if (path.empty() || IsDirectory(path)) return absl::OkStatus();
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    DS_RETURN_IF_ERROR(MakeDirectories(path.substr(0, slash)));
  }
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(absl::StrCat("mkdir ", path));
  }
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) {
  if (!Exists(path)) return absl::OkStatus();
  auto remove_one = [](const char* entry, const struct stat*, int, struct FTW*) -> int {
    return ::remove(entry);
  };
  if (::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0) {
    return ErrnoStatus(absl::StrCat("remove ", path));
  }
  return absl::OkStatus();
}

absl::Status Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoStatus(absl::StrCat("rename ", from, " to ", to));
  }
  return absl::OkStatus();
}

std::vector<std::string> ListDirectory(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return names;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

int64_t ModificationTimeNs(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace dslaunch::runtime::posix_fs

#include "runtime/offload/nvme_path_check.h"

#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>


#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dslaunch::runtime {
namespace {

constexpr long kTmpfsMagic = 0x01021994;

std::string GiB(int64_t bytes) { return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30)); }

}  // namespace

absl::Status CheckNvmePath(const std::string& key, const std::string& path, int64_t bytes) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(key, " is not set"));
  // stat, not std::filesystem (fs/file_system.h says why).
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::NotFoundError(absl::StrCat(key, "=", path, " is not a folder (it must exist on every host)"));
  }
  if (::access(path.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(key, "=", path, " is not writable by this user"));
  }
  struct statfs fs_info {};
  if (::statfs(path.c_str(), &fs_info) == 0 && fs_info.f_type == kTmpfsMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, "=", path, " is on tmpfs (memory): swapping to it saves no memory; give a folder on an NVMe drive"));
  }
  struct statvfs space {};
  if (bytes > 0 && ::statvfs(path.c_str(), &space) == 0) {
    const int64_t available = static_cast<int64_t>(space.f_bavail) * static_cast<int64_t>(space.f_frsize);
    if (available < bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(key, "=", path, " has ", available, " bytes (", GiB(available),
                                                       ") free; the swap files need ", bytes, " (", GiB(bytes), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime

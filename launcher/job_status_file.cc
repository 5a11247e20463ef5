#include "launcher/job_status_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dslaunch {
namespace {

constexpr char kSuffix[] = ".status";

// A job id names a file: nothing that leaves the folder or hides the file.
bool SafeFileName(const std::string& job_id) {
  if (job_id.empty() || job_id[0] == '.') return false;
  return std::all_of(job_id.begin(), job_id.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'; });
}

absl::Status CheckSafeFolder(const std::string& dir) {
  struct stat info;
  if (::lstat(dir.c_str(), &info) != 0) {
    return absl::NotFoundError(absl::StrCat("run folder ", dir, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(info.st_mode)) return absl::FailedPreconditionError(absl::StrCat("run folder ", dir, " is not a folder"));
  if (info.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat("run folder ", dir, " belongs to uid ", info.st_uid,
                                                    ", not to this user; set ", kRunDirVariable,
                                                    " to a folder of your own"));
  }
  if ((info.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat("run folder %s has mode %03o: others could read the "
                                                       "controllers' tokens in it; chmod 700 it",
                                                       dir, info.st_mode & 0777));
  }
  return absl::OkStatus();
}

bool ProcessAlive(int64_t pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

// The file at `path` as written by WriteJobStatusFile; false when it is not one.
bool ReadOne(const std::string& path, JobStatusFile* file) {
  std::ifstream in(path);
  if (!in) return false;
  file->path = path;
  for (std::string line; std::getline(in, line);) {
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space), value = line.substr(space + 1);
    if (key == "tls_dir") file->tls_dir = value;  // a path: may hold spaces
    if (key == "job_id") file->job_id = value;
    if (key == "address") file->address = value;
    if (key == "token") file->token = value;
    if (key == "pid") (void)absl::SimpleAtoi(value, &file->pid);
  }
  return !file->job_id.empty() && !file->address.empty() && !file->token.empty();
}

}  // namespace

std::string RunDirectory() {
  if (const char* dir = std::getenv(kRunDirVariable); dir != nullptr && *dir != '\0') return dir;
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime != nullptr && *runtime != '\0') {
    return absl::StrCat(runtime, "/dslaunch");
  }
  return absl::StrCat("/tmp/dslaunch-", ::geteuid());
}

absl::StatusOr<std::string> WriteJobStatusFile(const std::string& dir, const JobStatusFile& file) {
  if (!SafeFileName(file.job_id)) {
    return absl::InvalidArgumentError(absl::StrCat("job id '", file.job_id,
                                                   "' cannot name a status file (letters, digits, '-', '_', '.')"));
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create the run folder ", dir, ": ", std::strerror(errno)));
  }
  if (absl::Status safe = CheckSafeFolder(dir); !safe.ok()) return safe;
  const std::string path = absl::StrCat(dir, "/", file.job_id, kSuffix);
  // Another live controller of the same job id keeps its file.
  JobStatusFile existing;
  if (ReadOne(path, &existing) && existing.pid != file.pid && ProcessAlive(existing.pid)) {
    return absl::AlreadyExistsError(absl::StrCat("job '", file.job_id, "' already runs on this machine (dslaunch pid ",
                                                 existing.pid, ", ", path, "); give this job another --job_id"));
  }
  // A name of our own, created here (never a link or a file someone left).
  const std::string temporary = absl::StrCat(path, ".tmp.", ::getpid());
  ::unlink(temporary.c_str());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat("cannot write ", temporary, ": ", std::strerror(errno)));
  const std::string text = absl::StrCat("job_id ", file.job_id, "\naddress ", file.address, "\ntoken ", file.token,
                                        "\npid ", file.pid, "\n",
                                        file.tls_dir.empty() ? "" : absl::StrCat("tls_dir ", file.tls_dir, "\n"));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  ::close(fd);
  if (!written || ::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = written ? errno : saved;
    ::unlink(temporary.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(error)));
  }
  return path;
}

absl::StatusOr<std::vector<JobStatusFile>> ReadJobStatusFiles(const std::string& dir,
                                                              std::vector<std::string>* stale) {
  std::vector<JobStatusFile> files;
  std::error_code error;
  if (!std::filesystem::exists(dir, error)) return files;
  if (absl::Status safe = CheckSafeFolder(dir); !safe.ok()) return safe;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (!absl::EndsWith(name, kSuffix)) continue;
    JobStatusFile file;
    if (!ReadOne(entry.path().string(), &file)) continue;  // not one of ours
    if (!ProcessAlive(file.pid)) {
      if (stale != nullptr) stale->push_back(file.path);
      continue;
    }
    files.push_back(std::move(file));
  }
  if (error) return absl::InternalError(absl::StrCat("cannot list ", dir, ": ", error.message()));
  std::sort(files.begin(), files.end(),
            [](const JobStatusFile& a, const JobStatusFile& b) { return a.job_id < b.job_id; });
  return files;
}

ScopedJobStatusFile::~ScopedJobStatusFile() {
  // Only while the file is still this process's.
  JobStatusFile file;
  if (!path_.empty() && ReadOne(path_, &file) && file.pid == ::getpid()) ::unlink(path_.c_str());
}

}  // namespace dslaunch

#include "agent/process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string>
#include <string_view>

namespace dslaunch {
namespace {

// The whole of a small /proc file; false when it cannot be opened.
bool ReadProcFile(const std::string& path, std::string* content) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  content->clear();
  char buffer[4096];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      content->append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  ::close(fd);
  return true;
}

bool ParsePid(std::string_view text, pid_t* pid) {
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value <= 0) return false;
  *pid = static_cast<pid_t>(value);
  return true;
}

// Calls `visit(pid)` for each numeric entry of the /proc folder `dir`.
template <typename Visit>
bool ForEachPidEntry(const std::string& dir, Visit&& visit) {
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) return false;
  while (dirent* entry = ::readdir(handle)) {
    pid_t pid = 0;
    if (ParsePid(entry->d_name, &pid)) visit(pid);
  }
  ::closedir(handle);
  return true;
}

}  // namespace

bool ChildrenFromTaskFiles(pid_t pid, std::vector<pid_t>* children) {
  // The kernel has the files for every task or for none.
  static const bool kernel_has_them = ::access("/proc/thread-self/children", R_OK) == 0;
  if (!kernel_has_them) return false;
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  children->clear();
  ForEachPidEntry(task_dir, [&](pid_t tid) {
    std::string content;
    if (!ReadProcFile(task_dir + "/" + std::to_string(tid) + "/children", &content)) return;
    size_t at = 0;
    while (at < content.size()) {
      size_t end = content.find(' ', at);
      if (end == std::string::npos) end = content.size();
      pid_t child = 0;
      if (ParsePid(std::string_view(content).substr(at, end - at), &child)) children->push_back(child);
      at = end + 1;
    }
  });
  return true;
}

std::vector<pid_t> ChildrenFromProcScan(pid_t pid) {
  std::vector<pid_t> children;
  ForEachPidEntry("/proc", [&](pid_t candidate) {
    std::string stat;
    if (!ReadProcFile("/proc/" + std::to_string(candidate) + "/stat", &stat)) return;
    // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses.
    size_t paren = stat.rfind(')');
    if (paren == std::string::npos) return;
    size_t state_end = stat.find(' ', paren + 2);
    if (state_end == std::string::npos) return;
    size_t ppid_end = stat.find(' ', state_end + 1);
    if (ppid_end == std::string::npos) return;
    pid_t parent = 0;
    if (ParsePid(std::string_view(stat).substr(state_end + 1, ppid_end - state_end - 1), &parent) &&
        parent == pid) {
      children.push_back(candidate);
    }
  });
  return children;
}

std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> children;
  if (ChildrenFromTaskFiles(pid, &children)) return children;
  return ChildrenFromProcScan(pid);
}

}  // namespace dslaunch

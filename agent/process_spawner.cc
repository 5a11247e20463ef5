#include "agent/process_spawner.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/process/search_path.hpp>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/rank_keeper_protocol.h"
#include "common/status_macros.h"

extern char** environ;

namespace dslaunch {
namespace bp = boost::process;

namespace {

// A descriptor closed when it goes out of scope unless released.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.Release()) {}
  Fd& operator=(Fd&& other) noexcept {
    Reset(other.Release());
    return *this;
  }
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// CLOEXEC (no other rank inherits it) and numbered 10 or above, so that the
// keeper's dup2 onto fds 0-4 can never overwrite another of its sources.
absl::StatusOr<Fd> HighCloexec(int fd) {
  int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  int saved = errno;
  ::close(fd);
  if (high < 0) return ErrnoStatus("fcntl(F_DUPFD_CLOEXEC)", saved);
  return Fd(high);
}

struct Pipe {
  Fd read;
  Fd write;
};

absl::StatusOr<Pipe> MakePipe(bool nonblocking_read) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe2");
  Pipe pipe;
  DS_ASSIGN_OR_RETURN(pipe.read, HighCloexec(fds[0]));
  DS_ASSIGN_OR_RETURN(pipe.write, HighCloexec(fds[1]));
  if (nonblocking_read) {
    ::fcntl(pipe.read.get(), F_SETFL, ::fcntl(pipe.read.get(), F_GETFL) | O_NONBLOCK);
  }
  return pipe;
}

// The agent's environment with the request's variables added or replaced,
// as "NAME=VALUE" strings in the agent's order, new names after.
std::vector<std::string> EnvironmentForRank(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  std::unordered_map<std::string, size_t> index;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string text(*entry);
    size_t eq = text.find('=');
    if (eq == std::string::npos) continue;
    index.emplace(text.substr(0, eq), env.size());
    env.push_back(std::move(text));
  }
  for (const auto& [key, value] : overrides) {
    std::string text = absl::StrCat(key, "=", value);
    auto it = index.find(key);
    if (it != index.end()) {
      env[it->second] = std::move(text);
    } else {
      index.emplace(key, env.size());
      env.push_back(std::move(text));
    }
  }
  return env;
}

std::string Lookup(const std::vector<std::string>& env, absl::string_view name) {
  for (const auto& entry : env) {
    if (entry.size() > name.size() && entry[name.size()] == '=' &&
        absl::string_view(entry).substr(0, name.size()) == name) {
      return entry.substr(name.size() + 1);
    }
  }
  return "";
}

absl::StatusOr<Fd> SpecMemfd(const KeeperSpec& spec) {
  int raw = static_cast<int>(::syscall(SYS_memfd_create, "dsagent-rank-spec", MFD_CLOEXEC));
  if (raw < 0) return ErrnoStatus("memfd_create");
  DS_ASSIGN_OR_RETURN(Fd fd, HighCloexec(raw));
  const std::string encoded = EncodeKeeperSpec(spec);
  size_t done = 0;
  while (done < encoded.size()) {
    ssize_t n = ::write(fd.get(), encoded.data() + done, encoded.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("write rank spec");
    done += static_cast<size_t>(n);
  }
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) return ErrnoStatus("lseek rank spec");
  return fd;
}

// Reads the keeper's report pipe to its end (the keeper closes it right after
// its one line, or exits).
std::string ReadReport(int fd) {
  std::string text;
  char buffer[4096];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      text.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return text;
  }
}

// Starts dsagent_keeper with the rank's spec on fd 3, its report pipe on
// fd 4 and the rank's stdout/stderr pipes on 1 and 2.
absl::StatusOr<pid_t> StartKeeper(const std::string& keeper, int spec_fd, int report_fd,
                                  int stdout_fd, int stderr_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, stderr_fd, STDERR_FILENO);
  posix_spawn_file_actions_adddup2(&actions, spec_fd, kKeeperSpecFd);
  posix_spawn_file_actions_adddup2(&actions, report_fd, kKeeperReportFd);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  // Its own process group: a Ctrl-C on the agent's terminal never reaches it.
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attributes, 0);
  const sigset_t blocked = KeeperBlockedSignals();
  posix_spawnattr_setsigmask(&attributes, &blocked);
  std::string agent_pid = absl::StrCat(::getpid());
  std::vector<char*> argv = {const_cast<char*>(keeper.c_str()), const_cast<char*>("--agent_pid"),
                             agent_pid.data(), nullptr};
  pid_t pid = 0;
  int error = ::posix_spawn(&pid, keeper.c_str(), &actions, &attributes, argv.data(), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) return ErrnoStatus(absl::StrCat("cannot start the rank keeper '", keeper, "'"), error);
  return pid;
}

void EndKeeper(pid_t keeper) {
  ::kill(keeper, SIGTERM);  // the keeper SIGKILLs whatever it started
  while (::waitpid(keeper, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

absl::StatusOr<SpawnedProcess> SpawnRankProcess(const SpawnRequest& request) {
  if (request.argv.empty() || request.argv[0].empty()) {
    return absl::InvalidArgumentError("no program to start");
  }
  if (request.keeper.empty()) {
    return absl::FailedPreconditionError("no rank keeper (dsagent_keeper) configured");
  }
  const std::string& program = request.argv[0];
  if (!request.working_dir.empty()) {
    struct stat st;
    if (::stat(request.working_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::NotFoundError(absl::StrCat("working directory ", request.working_dir,
                                              " does not exist on this host"));
    }
  }

  KeeperSpec spec;
  spec.env = EnvironmentForRank(request.env);
  spec.cpus = request.cpus;
  spec.mem_node = request.mem_node;
  spec.uid = request.uid;
  spec.gid = request.gid;
  spec.groups = request.groups;
  boost::filesystem::path exe;
  if (program.find('/') != std::string::npos) {
    exe = program;
    // A relative path is relative to the rank's working directory.
    if (exe.is_relative() && !request.working_dir.empty()) {
      exe = boost::filesystem::path(request.working_dir) / exe;
    }
  } else {
    std::vector<boost::filesystem::path> path_dirs;
    for (absl::string_view dir : absl::StrSplit(Lookup(spec.env, "PATH"), ':', absl::SkipEmpty())) {
      path_dirs.emplace_back(std::string(dir));
    }
    exe = bp::search_path(program, path_dirs);
    if (exe.empty()) {
      return absl::NotFoundError(absl::StrCat("program '", program, "' not found in PATH"));
    }
  }
  if (::access(exe.c_str(), X_OK) != 0) {
    return ErrnoStatus(absl::StrCat("cannot execute '", exe.string(), "'"));
  }
  spec.exe = exe.string();
  spec.working_dir = request.working_dir;
  spec.argv = request.argv;
  spec.argv[0] = exe.string();  // what ranks have always seen as argv[0]

  DS_ASSIGN_OR_RETURN(Fd spec_fd, SpecMemfd(spec));
  DS_ASSIGN_OR_RETURN(Pipe out, MakePipe(/*nonblocking_read=*/true));
  DS_ASSIGN_OR_RETURN(Pipe err, MakePipe(/*nonblocking_read=*/true));
  DS_ASSIGN_OR_RETURN(Pipe report, MakePipe(/*nonblocking_read=*/false));
  DS_ASSIGN_OR_RETURN(pid_t keeper, StartKeeper(request.keeper, spec_fd.get(), report.write.get(),
                                                out.write.get(), err.write.get()));
  spec_fd.Reset();
  out.write.Reset();
  err.write.Reset();
  report.write.Reset();

  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, keeper, 0));
  if (pidfd < 0) {
    absl::Status status = ErrnoStatus("pidfd_open");
    EndKeeper(keeper);
    return status;
  }
  Fd keeper_fd(pidfd);
  const std::string text = ReadReport(report.read.get());
  KeeperReport parsed;
  if (!ParseKeeperReport(text, &parsed)) {
    int status = 0;
    ::kill(keeper, SIGTERM);
    while (::waitpid(keeper, &status, 0) < 0 && errno == EINTR) {
    }
    std::string how = WIFSIGNALED(status) ? absl::StrCat("killed by signal ", WTERMSIG(status))
                                          : absl::StrCat("exit code ", WEXITSTATUS(status));
    return absl::InternalError(absl::StrCat("the rank keeper '", request.keeper, "' ended (", how,
                                            ") without starting '", exe.string(), "'"));
  }
  if (!parsed.started) {
    EndKeeper(keeper);
    return absl::InternalError(parsed.error);
  }
  return SpawnedProcess{parsed.rank_pid, keeper, keeper_fd.Release(), out.read.Release(),
                        err.read.Release()};
}

}  // namespace dslaunch

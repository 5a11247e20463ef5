#include "agent/process_spawner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/process/args.hpp>
#include <boost/process/child.hpp>
#include <boost/process/env.hpp>
#include <boost/process/environment.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <boost/process/io.hpp>
#include <boost/process/search_path.hpp>
#include <boost/process/start_dir.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dslaunch {
namespace bp = boost::process;

namespace {

struct Pipe {
  int read_fd = -1;
  int write_fd = -1;
  void Close() {
    if (read_fd >= 0) ::close(read_fd);
    if (write_fd >= 0) ::close(write_fd);
    read_fd = write_fd = -1;
  }
};

absl::StatusOr<Pipe> MakePipe() {
  int fds[2];
  // CLOEXEC: no other rank inherits this rank's pipe ends.
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe2");
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  return Pipe{fds[0], fds[1]};
}

// Runs in the child between fork and exec: async-signal-safe calls only.
struct RankChildSetup {
  pid_t agent_pid;
  int stdout_write;
  int stderr_write;

  template <typename Executor>
  void operator()(Executor&) const {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The agent may have died between fork and prctl.
    if (::getppid() != agent_pid) ::_exit(127);
    ::dup2(stdout_write, STDOUT_FILENO);  // dup2 clears CLOEXEC on the copy
    ::dup2(stderr_write, STDERR_FILENO);
    // Undo the agent's signal mask (its signal thread blocks SIGINT/SIGTERM).
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    ::sigaction(SIGPIPE, &default_action, nullptr);
  }
};

}  // namespace

absl::StatusOr<SpawnedProcess> SpawnRankProcess(const SpawnRequest& request) {
  if (request.argv.empty() || request.argv[0].empty()) {
    return absl::InvalidArgumentError("no program to start");
  }
  const std::string& program = request.argv[0];
  if (!request.working_dir.empty()) {
    struct stat st;
    if (::stat(request.working_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::NotFoundError(absl::StrCat("working directory ", request.working_dir,
                                              " does not exist on this host"));
    }
  }

  bp::environment env = boost::this_process::environment();
  for (const auto& [key, value] : request.env) env[key] = value;

  boost::filesystem::path exe;
  if (program.find('/') != std::string::npos) {
    exe = program;
    // A relative path is relative to the rank's working directory.
    if (exe.is_relative() && !request.working_dir.empty()) {
      exe = boost::filesystem::path(request.working_dir) / exe;
    }
  } else {
    std::vector<boost::filesystem::path> path_dirs;
    auto path_it = env.find("PATH");
    if (path_it != env.end()) {
      for (const auto& dir : path_it->to_vector()) path_dirs.emplace_back(dir);
    }
    exe = bp::search_path(program, path_dirs);
    if (exe.empty()) {
      return absl::NotFoundError(absl::StrCat("program '", program, "' not found in PATH"));
    }
  }
  if (::access(exe.c_str(), X_OK) != 0) {
    return ErrnoStatus(absl::StrCat("cannot execute '", exe.string(), "'"));
  }

  DS_ASSIGN_OR_RETURN(Pipe out, MakePipe());
  auto err_pipe = MakePipe();
  if (!err_pipe.ok()) {
    out.Close();
    return err_pipe.status();
  }
  Pipe err = *err_pipe;

  std::vector<std::string> args(request.argv.begin() + 1, request.argv.end());
  RankChildSetup setup{::getpid(), out.write_fd, err.write_fd};
  std::error_code spawn_error;
  bp::child child;
  if (request.working_dir.empty()) {
    child = bp::child(bp::exe = exe, bp::args = args, env, bp::std_in < bp::null,
                      bp::extend::on_exec_setup = setup, spawn_error);
  } else {
    child = bp::child(bp::exe = exe, bp::args = args, env, bp::std_in < bp::null,
                      bp::start_dir = request.working_dir, bp::extend::on_exec_setup = setup,
                      spawn_error);
  }
  ::close(out.write_fd);
  ::close(err.write_fd);
  if (spawn_error) {
    ::close(out.read_fd);
    ::close(err.read_fd);
    return absl::InternalError(
        absl::StrCat("cannot start '", exe.string(), "': ", spawn_error.message()));
  }
  pid_t pid = child.id();
  // The supervisor reaps the child itself (through the pidfd and waitpid).
  child.detach();
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    absl::Status status = ErrnoStatus("pidfd_open");
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ::close(out.read_fd);
    ::close(err.read_fd);
    return status;
  }
  return SpawnedProcess{pid, pidfd, out.read_fd, err.read_fd};
}

}  // namespace dslaunch

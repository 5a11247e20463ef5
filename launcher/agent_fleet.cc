#include "launcher/agent_fleet.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <boost/process/args.hpp>
#include <boost/process/child.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <boost/process/search_path.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/net_address.h"
#include "common/status_macros.h"

namespace dslaunch {
namespace bp = boost::process;

namespace {

constexpr char kReadyPrefix[] = "DSAGENT_READY ";

// Note [Token on stdin]: the token of the agents dslaunch starts travels on
// each agent's stdin pipe rather than in a file (for ssh and srun agents, down
// the session to the remote agent's stdin: no host needs the token file, and
// no agent's command line, which a rank can read in /proc, names one). A file would need a folder to
// hold it and someone to remove it: a SIGKILL of dslaunch (or any death that
// runs no destructor) left /tmp/dslaunch-XXXXXX with the 0600 token behind,
// and unlinking it once the agents have read it still leaves that window.
// A pipe's bytes die with its last open end, which the kernel closes on any
// death, so there is nothing to clean up on any exit path. (Not the
// environment: a rank inherits its agent's environment, and must never see
// its token.)

// Runs in the agent's child between fork and exec: its own process group (a
// Ctrl-C on the terminal reaches only dslaunch, which then stops the job in
// order) and SIGTERM when dslaunch dies, so a killed controller leaves no
// local agent behind.
struct AgentChildSetup {
  pid_t controller_pid;
  int stdin_read;
  int stdout_write;
  int stderr_fd;
  template <typename Executor>
  void operator()(Executor&) const {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != controller_pid) ::_exit(1);
    ::dup2(stdin_read, STDIN_FILENO);
    ::dup2(stdout_write, STDOUT_FILENO);
    ::dup2(stderr_fd, STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
  }
};

std::string SafeFileName(const std::string& host) {
  std::string name = host;
  for (char& c : name) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) c = '_';
  }
  return name;
}

// The last `count` lines of the file open at `fd` (its last 2 KiB at most),
// joined with " | ".
std::string LastLines(int fd, int count) {
  if (fd < 0) return "";
  struct stat info {};
  if (::fstat(fd, &info) != 0 || info.st_size <= 0) return "";
  const off_t size = info.st_size;
  const off_t from = std::max<off_t>(0, size - 2048);
  std::string text(static_cast<size_t>(size - from), '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), from);
  if (n <= 0) return "";
  text.resize(static_cast<size_t>(n));
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  if (from > 0 && !lines.empty()) lines.erase(lines.begin());  // cut mid-line
  if (static_cast<int>(lines.size()) > count) lines.erase(lines.begin(), lines.end() - count);
  for (std::string& line : lines) line = std::string(absl::StripAsciiWhitespace(line));
  return absl::StrJoin(lines, " | ");
}

}  // namespace

AgentFleet::~AgentFleet() {
  for (const Started& agent : started_) {
    if (agent.stdin_fd >= 0) ::close(agent.stdin_fd);
    ::kill(agent.pid, SIGTERM);
  }
  for (const Started& agent : started_) {
    // Agents stop their ranks (already stopped by the job) and exit promptly;
    // bound the wait all the same.
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(agent.pid, nullptr, WNOHANG) != 0) break;
      ::usleep(50 * 1000);
      if (i == 99) {
        ::kill(agent.pid, SIGKILL);
        ::waitpid(agent.pid, nullptr, 0);
      }
    }
  }
}

absl::StatusOr<int> AgentFleet::SpawnAndWaitReady(const std::string& host,
                                                  const std::vector<std::string>& argv,
                                                  const AgentLaunchOptions& options,
                                                  const std::string& stdin_text) {
  int in_pipe[2], out_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe2");
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    ::close(in_pipe[0]);
    ::close(in_pipe[1]);
    return ErrnoStatus("pipe2");
  }
  // Note [Token on stdin]: a few bytes into an empty pipe never block
  // (a pipe holds at least 4 KiB, PIPE_BUF); the agent reads them first.
  if (!stdin_text.empty() &&
      ::write(in_pipe[1], stdin_text.data(), stdin_text.size()) != static_cast<ssize_t>(stdin_text.size())) {
    absl::Status error = ErrnoStatus("write to the agent's stdin");
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1]}) ::close(fd);
    return error;
  }
  // The agent's stderr (and ssh's or srun's): the job's log folder, or else an
  // unnamed file that goes with the agent. Either way its last lines explain
  // an agent that never reports ready ("Permission denied (publickey)").
  std::string log_path;
  int log_fd = -1;
  if (!options.agent_log_dir.empty()) {
    log_path = absl::StrCat(options.agent_log_dir, "/agent_", SafeFileName(host), ".log");
    log_fd = ::open(log_path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) return ErrnoStatus(absl::StrCat("open ", log_path));
  } else {
    log_fd = ::open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (log_fd < 0) log_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (log_fd < 0) return ErrnoStatus("open /dev/null");
  }
  const int tail_fd = ::fcntl(log_fd, F_DUPFD_CLOEXEC, 0);  // ours, to read the tail

  boost::filesystem::path exe = argv[0];
  if (argv[0].find('/') == std::string::npos) exe = bp::search_path(argv[0]);
  if (exe.empty() || ::access(exe.c_str(), X_OK) != 0) {
    ::close(log_fd);
    if (tail_fd >= 0) ::close(tail_fd);
    return absl::NotFoundError(absl::StrCat("cannot execute '", argv[0], "' to start the agent for ",
                                            host, " (see --agent_binary, --ssh_command / --slurm_command)"));
  }
  std::vector<std::string> args(argv.begin() + 1, argv.end());
  std::error_code error;
  bp::child child(bp::exe = exe, bp::args = args,
                  bp::extend::on_exec_setup =
                      AgentChildSetup{::getpid(), in_pipe[0], out_pipe[1], log_fd},
                  error);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  ::close(log_fd);
  if (error) {
    ::close(in_pipe[1]);
    ::close(out_pipe[0]);
    if (tail_fd >= 0) ::close(tail_fd);
    return absl::InternalError(absl::StrCat("cannot start the agent for ", host, ": ",
                                            error.message()));
  }
  pid_t pid = child.id();
  child.detach();
  started_.push_back(Started{pid, in_pipe[1]});

  // Read the ready line, bounded by the timeout.
  std::string received;
  auto deadline = std::chrono::steady_clock::now() + options.ready_timeout;
  int port = -1;
  bool exited = false;
  while (port < 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd fd{out_pipe[0], POLLIN, 0};
    if (::poll(&fd, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[512];
    ssize_t n = ::read(out_pipe[0], chunk, sizeof(chunk));
    if (n <= 0) {  // the agent (or ssh) exited
      exited = true;
      break;
    }
    received.append(chunk, static_cast<size_t>(n));
    size_t at = received.find(kReadyPrefix);
    size_t end = at == std::string::npos ? at : received.find('\n', at);
    if (end != std::string::npos) {
      std::string address = received.substr(at + sizeof(kReadyPrefix) - 1,
                                             end - at - (sizeof(kReadyPrefix) - 1));
      auto parsed = ParseHostPort(address, "agent ready line");
      if (!parsed.ok()) {
        ::close(out_pipe[0]);
        return parsed.status();
      }
      port = parsed->port;
    }
  }
  ::close(out_pipe[0]);
  if (port < 0) {
    if (exited) {
      // Its last words are written by now, or very soon after the pipe
      // closed. WNOWAIT: the zombie keeps its pid, which the destructor signals.
      for (int i = 0; i < 20; ++i) {
        siginfo_t info{};
        const int polled = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
        if (polled != 0 || info.si_pid != 0) break;
        ::usleep(10 * 1000);
      }
    }
    const std::string said = LastLines(tail_fd, 5);
    if (tail_fd >= 0) ::close(tail_fd);
    std::string hint = options.agent_log_dir.empty() ? "rerun with --log_dir to keep the agent's log"
                                                     : absl::StrCat("see ", log_path);
    return absl::UnavailableError(absl::StrCat(
        "the agent for ", host,
        exited ? " exited before it reported ready"
               : absl::StrCat(" did not report ready within ", options.ready_timeout.count(), " ms"),
        " (", absl::StrJoin(argv, " "), ")", said.empty() ? "" : absl::StrCat(": ", said), "; ", hint));
  }
  if (tail_fd >= 0) ::close(tail_fd);
  return port;
}

namespace {

// The flags every started agent gets when they are set.
void AppendOptionalFlags(const AgentLaunchOptions& options, std::vector<std::string>& argv) {
  if (!options.metrics_addr.empty()) {
    argv.push_back("--metrics_addr");
    argv.push_back(options.metrics_addr);
  }
  if (!options.tls_dir.empty()) {  // Note [Mutual TLS]
    argv.push_back("--tls_dir");
    argv.push_back(options.tls_dir);
  }
  if (!options.allow_run_as.empty()) {  // Note [Ranks as another user]
    argv.push_back("--allow_run_as");
    argv.push_back(options.allow_run_as);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<AgentFleet>> AgentFleet::StartLocal(
    const std::vector<std::string>& hosts, const AgentLaunchOptions& options) {
  auto fleet = std::unique_ptr<AgentFleet>(new AgentFleet());
  const bool token_on_stdin = options.token_file.empty();
  if (token_on_stdin && options.token.empty()) {
    return absl::InvalidArgumentError("local agents need a token (a file or one to hand over on stdin)");
  }
  for (const std::string& host : hosts) {
    std::vector<std::string> argv = {options.agent_binary, "--listen", "127.0.0.1:0"};
    if (token_on_stdin) {
      argv.push_back("--token_stdin");
    } else {
      argv.push_back("--token_file");
      argv.push_back(options.token_file);
    }
    for (const std::string& arg : {std::string("--name"), host, std::string("--lease_ms"),
                                   absl::StrCat(options.lease_ms), std::string("--stop_grace_ms"),
                                   absl::StrCat(options.stop_grace_ms)}) {
      argv.push_back(arg);
    }
    AppendOptionalFlags(options, argv);
    DS_ASSIGN_OR_RETURN(int port, fleet->SpawnAndWaitReady(host, argv, options,
                                                           token_on_stdin ? options.token + "\n" : ""));
    fleet->endpoints_.push_back({host, absl::StrCat("127.0.0.1:", port)});
  }
  return fleet;
}

absl::StatusOr<std::unique_ptr<AgentFleet>> AgentFleet::StartOverSsh(
    const std::vector<std::string>& hosts, const AgentLaunchOptions& options) {
  // The agent listens where the ssh connection came in (SSH_CONNECTION),
  // the address this controller reached its host at; no other interface.
  return StartRemote(
      hosts, options,
      [&](const std::string& host) {
        std::vector<std::string> argv = options.ssh_command;
        argv.push_back(host);
        return argv;
      },
      {"--listen_on_ssh_address"});
}

absl::StatusOr<std::unique_ptr<AgentFleet>> AgentFleet::StartOverSlurm(
    const std::vector<std::string>& hosts, const AgentLaunchOptions& options) {
  // An srun step knows no address it was reached at: every interface.
  return StartRemote(
      hosts, options,
      [&](const std::string& host) {
        std::vector<std::string> argv = options.slurm_command;
        for (const std::string& arg : {std::string("--nodes=1"), std::string("--ntasks=1"), "--nodelist=" + host}) {
          argv.push_back(arg);
        }
        return argv;
      },
      {"--listen", "0.0.0.0:0"});
}

absl::StatusOr<std::unique_ptr<AgentFleet>> AgentFleet::StartRemote(
    const std::vector<std::string>& hosts, const AgentLaunchOptions& options,
    const std::function<std::vector<std::string>(const std::string& host)>& remote,
    const std::vector<std::string>& listen) {
  if (options.token.empty()) return absl::InvalidArgumentError("remote agents need a token to hand over on stdin");
  auto fleet = std::unique_ptr<AgentFleet>(new AgentFleet());
  for (const std::string& host : hosts) {
    std::vector<std::string> argv = remote(host);
    argv.push_back(options.agent_binary);
    for (const std::string& arg : listen) argv.push_back(arg);
    // Note [Token on stdin]: the token goes down the ssh session (or srun
    // step) as the first line of the agent's stdin, so no host needs a copy
    // of the file, and no command line (which any rank can read in /proc)
    // names one.
    for (const std::string& arg :
         {std::string("--exit_on_stdin_eof"), std::string("--token_stdin"), std::string("--name"), host,
          std::string("--lease_ms"), absl::StrCat(options.lease_ms), std::string("--stop_grace_ms"),
          absl::StrCat(options.stop_grace_ms)}) {
      argv.push_back(arg);
    }
    AppendOptionalFlags(options, argv);
    DS_ASSIGN_OR_RETURN(int port, fleet->SpawnAndWaitReady(host, argv, options, options.token + "\n"));
    fleet->endpoints_.push_back({host, HostPort{host, port}.ToString()});
  }
  return fleet;
}

absl::StatusOr<std::unique_ptr<AgentFleet>> AgentFleet::Existing(
    const std::vector<std::string>& addresses) {
  auto fleet = std::unique_ptr<AgentFleet>(new AgentFleet());
  for (const std::string& address : addresses) {
    DS_ASSIGN_OR_RETURN(HostPort parsed, ParseHostPort(address, "--agents"));
    if (parsed.port == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--agents: '", address, "' needs the agent's port (not 0)"));
    }
    fleet->endpoints_.push_back({parsed.host, address});
  }
  return fleet;
}

}  // namespace dslaunch

#include "agent/rank_supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"

namespace dslaunch {
namespace {

// Splits a byte stream into lines; `emit` gets each line without its newline.
class LineBuffer {
 public:
  template <typename Emit>
  void Append(const char* data, size_t size, Emit&& emit) {
    pending_.append(data, size);
    size_t start = 0;
    while (true) {
      size_t newline = pending_.find('\n', start);
      if (newline == std::string::npos) break;
      emit(pending_.substr(start, newline - start));
      start = newline + 1;
    }
    pending_.erase(0, start);
    while (pending_.size() >= RankSupervisor::kMaxLineBytes) {
      emit(pending_.substr(0, RankSupervisor::kMaxLineBytes));
      pending_.erase(0, RankSupervisor::kMaxLineBytes);
    }
  }
  template <typename Emit>
  void Flush(Emit&& emit) {
    if (!pending_.empty()) emit(pending_);
    pending_.clear();
  }

 private:
  std::string pending_;
};

// Reads what is available now. Returns false at end of file or on error.
template <typename Emit>
bool ReadAvailable(int fd, LineBuffer& buffer, Emit&& emit) {
  char chunk[16384];
  while (true) {
    ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n > 0) {
      buffer.Append(chunk, static_cast<size_t>(n), emit);
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

}  // namespace

RankSupervisor::RankSupervisor(int attempt, int global_rank, SpawnRequest request, EventSink sink)
    : attempt_(attempt), global_rank_(global_rank), sink_(std::move(sink)) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this, request = std::move(request)]() mutable { Run(std::move(request)); });
}

RankSupervisor::~RankSupervisor() {
  Stop(std::chrono::milliseconds(0));
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

bool RankSupervisor::Stop(std::chrono::milliseconds grace, StopCause cause) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_.load()) return false;
  auto deadline = std::chrono::steady_clock::now() + grace;
  if (!stop_requested_ || deadline < kill_deadline_) kill_deadline_ = deadline;
  bool first = !stop_requested_;
  stop_requested_ = true;
  if (first) stop_cause_ = std::move(cause);
  // Signal right here rather than from the supervising thread: fail-fast
  // latency is the point.
  if (pid_ > 0) {
    ::kill(-pid_, grace.count() == 0 ? SIGKILL : (first ? SIGTERM : 0));
    // A stopped (SIGSTOP, frozen) rank only acts on SIGTERM once continued.
    if (grace.count() > 0 && first) ::kill(-pid_, SIGCONT);
  }
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
  (void)ignored;
  return true;
}

pid_t RankSupervisor::WaitForSpawn() {
  std::unique_lock<std::mutex> lock(mu_);
  spawn_cv_.wait(lock, [&] { return spawn_attempted_; });
  return pid_;
}

pid_t RankSupervisor::pid() {
  std::lock_guard<std::mutex> lock(mu_);
  return pid_;
}

void RankSupervisor::WaitEnded() {
  std::unique_lock<std::mutex> lock(mu_);
  ended_cv_.wait(lock, [&] { return ended_.load(); });
}

void RankSupervisor::Emit(RankEvent event) {
  event.set_attempt(attempt_);
  event.set_global_rank(global_rank_);
  sink_(std::move(event));
}

RankState RankSupervisor::state() {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_.load()) return end_state_;
  return pid_ > 0 ? RANK_RUNNING : RANK_SPAWNING;
}

void RankSupervisor::EmitEnded(RankState state, int exit_code, int signal,
                               const std::string& detail) {
  absl::Status moved = lifecycle_.Transition(state);
  if (!moved.ok()) LogLine(absl::StrCat("rank ", global_rank_, ": ", moved.message()));
  RankEvent event;
  RankEnded* ended = event.mutable_ended();
  ended->set_state(state);
  ended->set_exit_code(exit_code);
  ended->set_signal(signal);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended->set_stopped_by_agent(stop_requested_);
    if (stop_requested_) {
      ended->set_stop_reason(stop_cause_.reason);
      ended->set_stop_detail(stop_cause_.detail);
      ended->set_controller_silent_ms(stop_cause_.controller_silent_ms);
    }
    end_state_ = state;
    ended_.store(true);
  }
  ended->set_ended_unix_us(absl::ToUnixMicros(absl::Now()));
  for (const auto& line : stderr_tail_) ended->add_stderr_tail(line);
  ended->set_detail(detail);
  Emit(std::move(event));
  ended_cv_.notify_all();
}

void RankSupervisor::Run(SpawnRequest request) {
  auto spawned = SpawnRankProcess(request);
  {
    std::lock_guard<std::mutex> lock(mu_);
    spawn_attempted_ = true;
    if (spawned.ok()) {
      pid_ = spawned->pid;
      // A stop that arrived while we were spawning.
      if (stop_requested_) ::kill(-pid_, SIGTERM);
    }
  }
  spawn_cv_.notify_all();
  if (!spawned.ok()) {
    stderr_tail_.push_back(absl::StrCat("dsagent: ", spawned.status().message()));
    EmitEnded(RANK_LOST, 127, 0, std::string(spawned.status().message()));
    return;
  }
  (void)lifecycle_.Transition(RANK_RUNNING);
  RankEvent started;
  started.mutable_started()->set_pid(spawned->pid);
  Emit(std::move(started));
  Supervise(*spawned);
}

void RankSupervisor::Supervise(const SpawnedProcess& process) {
  LineBuffer out_lines, err_lines;
  auto emit_stdout = [&](std::string line) {
    RankEvent event;
    event.mutable_output()->set_is_stderr(false);
    event.mutable_output()->set_line(std::move(line));
    Emit(std::move(event));
  };
  auto emit_stderr = [&](std::string line) {
    stderr_tail_.push_back(line);
    if (stderr_tail_.size() > kStderrTailLines) stderr_tail_.pop_front();
    RankEvent event;
    event.mutable_output()->set_is_stderr(true);
    event.mutable_output()->set_line(std::move(line));
    Emit(std::move(event));
  };

  bool out_open = true, err_open = true, killed = false;
  while (true) {
    int timeout_ms = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_requested_ && !killed) {
        auto left = kill_deadline_ - std::chrono::steady_clock::now();
        if (left <= std::chrono::milliseconds(0)) {
          ::kill(-process.pid, SIGKILL);
          killed = true;
        } else {
          timeout_ms = static_cast<int>(
              std::chrono::ceil<std::chrono::milliseconds>(left).count());
        }
      }
    }
    pollfd fds[4] = {{out_open ? process.stdout_fd : -1, POLLIN, 0},
                     {err_open ? process.stderr_fd : -1, POLLIN, 0},
                     {process.pidfd, POLLIN, 0},
                     {wake_fd_, POLLIN, 0}};
    int ready = ::poll(fds, 4, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      LogLine(absl::StrCat("rank ", global_rank_, ": poll failed: ", std::strerror(errno)));
      break;
    }
    if (fds[3].revents) {
      uint64_t count;
      ssize_t ignored = ::read(wake_fd_, &count, sizeof(count));
      (void)ignored;
    }
    if (out_open && fds[0].revents) out_open = ReadAvailable(process.stdout_fd, out_lines, emit_stdout);
    if (err_open && fds[1].revents) err_open = ReadAvailable(process.stderr_fd, err_lines, emit_stderr);
    if (fds[2].revents) break;
  }

  // The keeper ends with the rank's own status, once it has killed whatever
  // the rank left running (Note [Rank keeper]).
  int status = 0;
  while (::waitpid(process.keeper_pid, &status, 0) < 0 && errno == EINTR) {
  }
  // Whatever the rank wrote before exiting is still in the pipes; take it
  // without waiting for EOF (a leftover child could hold the pipe open).
  if (out_open) ReadAvailable(process.stdout_fd, out_lines, emit_stdout);
  if (err_open) ReadAvailable(process.stderr_fd, err_lines, emit_stderr);
  out_lines.Flush(emit_stdout);
  err_lines.Flush(emit_stderr);
  // Only when the keeper itself was SIGKILLed can the rank's group still have
  // members (the rank died by its parent-death signal); end them.
  ::kill(-process.pid, SIGKILL);
  ::close(process.stdout_fd);
  ::close(process.stderr_fd);
  ::close(process.pidfd);

  if (WIFSIGNALED(status)) {
    EmitEnded(RANK_KILLED, 0, WTERMSIG(status), "");
  } else {
    EmitEnded(RANK_EXITED, WEXITSTATUS(status), 0, "");
  }
}

}  // namespace dslaunch

#include "launcher/status_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/auth_token.h"
#include "common/flag_table.h"
#include "common/tls_files.h"
#include "launcher/job_status_file.h"
#include "launcher/launcher_notice.h"
#include "launcher/subcommand_flags.h"
#include "proto/controller.grpc.pb.h"

namespace dslaunch {
namespace {

// 75 → "1:15", 3725 → "1:02:05".
std::string Duration(double seconds) {
  const int64_t total = static_cast<int64_t>(seconds + 0.5);
  if (total >= 3600) return absl::StrFormat("%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60);
  return absl::StrFormat("%d:%02d", total / 60, total % 60);
}

// "JOB_RUNNING" → "RUNNING"; a state this client does not know, by number.
std::string StateName(JobState state) {
  const std::string name = JobState_Name(state);
  return name.size() > 4 ? name.substr(4) : absl::StrCat("state ", static_cast<int>(state));
}

std::string RankStateName(const RankStatus& rank) {
  switch (rank.state()) {
    case RANK_SPAWNING: return "starting";
    case RANK_RUNNING: return "running";
    default: return rank.end().empty() ? "ended" : rank.end();
  }
}

bool Finished(JobState state) { return state == JOB_SUCCEEDED || state == JOB_FAILED || state == JOB_CANCELLED; }

std::string StepText(const JobStatusReply& status) {
  if (status.step() < 0) return "no step yet";
  if (status.total_steps() <= 0) return absl::StrCat("step ", status.step());
  return absl::StrFormat("step %d/%d (%d%%)", status.step(), status.total_steps(),
                         100 * status.step() / status.total_steps());
}

struct Target {
  std::string job_id;
  std::string address;
  std::string token;
  std::string tls_dir;  // Note [Mutual TLS]: empty: plaintext
};

absl::StatusOr<JobStatusReply> Ask(const Target& target) {
  std::optional<TlsFiles> tls;
  if (!target.tls_dir.empty()) {
    auto read = ReadTlsDir(target.tls_dir, "--tls_dir");
    if (!read.ok()) return read.status();
    tls = std::move(*read);
  }
  auto channel = grpc::CreateChannel(target.address, ChannelCredentialsFor(tls ? &*tls : nullptr));
  auto stub = Controller::NewStub(channel);
  grpc::ClientContext context;
  AttachToken(&context, target.token);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  JobStatusRequest request;
  request.set_job_id(target.job_id);
  JobStatusReply reply;
  const grpc::Status status = stub->GetJobStatus(&context, request, &reply);
  if (status.ok()) return reply;
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE || status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::UnavailableError(absl::StrCat("the controller of job ", target.job_id.empty() ? "?" : target.job_id,
                                               " at ", target.address, " did not answer (", status.error_message(),
                                               "); the job may have ended"));
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(target.address, ": ", status.error_message()));
}

}  // namespace

std::string FormatJobStatus(const JobStatusReply& status) {
  const double up = (status.now_unix_ms() - status.job_started_unix_ms()) / 1000.0;
  std::string out = absl::StrFormat("job %s: %s, attempt %d, restarts %d of %d, up %s\n", status.job_id(),
                                    StateName(status.state()), status.attempt(), status.restarts_used(),
                                    status.max_restarts(), Duration(up));
  absl::StrAppend(&out, "progress: ", StepText(status));
  if (status.steps_per_second() > 0) absl::StrAppendFormat(&out, ", %.3g steps/s", status.steps_per_second());
  if (status.eta_seconds() >= 0) absl::StrAppend(&out, ", eta ", Duration(status.eta_seconds()));
  absl::StrAppendFormat(&out, "; %d of %d rank(s) alive\n", status.ranks_alive(), status.world_size());
  if (!status.last_checkpoint().empty()) {
    absl::StrAppend(&out, "last checkpoint: ", status.last_checkpoint(), ", committed ",
                    Duration((status.now_unix_ms() - status.last_checkpoint_unix_ms()) / 1000.0), " ago\n");
  }
  if (!status.last_error().empty()) absl::StrAppend(&out, "last error: ", status.last_error(), "\n");
  absl::StrAppendFormat(&out, "%-5s %-16s %-5s %-20s %-8s %-6s %-10s %-8s %-9s %s\n", "RANK", "HOST", "LOCAL",
                        "STATE", "PID", "STEP", "HEARTBEAT", "LOSS", "TOKENS/S", "GPU MEM");
  for (const RankStatus& rank : status.ranks()) {
    const std::string pid = rank.pid() > 0 ? absl::StrCat(rank.pid()) : "-";
    const std::string step = rank.step() >= 0 ? absl::StrCat(rank.step()) : "-";
    const std::string beat =
        rank.heartbeat_age_ms() >= 0 ? absl::StrFormat("%.1f s ago", rank.heartbeat_age_ms() / 1000.0) : "-";
    const RankMetrics& m = rank.metrics();
    const std::string loss = rank.has_metrics() ? absl::StrFormat("%.4f", m.loss()) : "-";
    const std::string tokens = m.tokens_per_second() > 0 ? absl::StrFormat("%.0f", m.tokens_per_second()) : "-";
    const std::string memory =
        m.gpu_memory_bytes() > 0 ? absl::StrFormat("%.1f GiB", m.gpu_memory_bytes() / (1u << 30)) : "-";
    absl::StrAppendFormat(&out, "%-5d %-16s %-5d %-20s %-8s %-6s %-10s %-8s %-9s %s\n", rank.global_rank(),
                          rank.host(), rank.local_rank(), RankStateName(rank), pid, step, beat, loss, tokens, memory);
  }
  return out;
}

std::string FormatJobLine(const JobStatusReply& status) {
  return absl::StrFormat("%-14s %-10s %-24s %d/%d rank(s) alive", status.job_id(), StateName(status.state()),
                         StepText(status), status.ranks_alive(), status.world_size());
}

int RunStatusCommand(const std::vector<std::string>& args) {
  std::string job_id, controller, token_file, tls_dir;
  bool watch = false;
  int64_t interval_ms = 2000;
  FlagTable flags("dslaunch status",
                  "dslaunch status [--job ID] [--watch] [--controller HOST:PORT --token_file FILE [--tls_dir DIR]]");
  flags.String("--job", &job_id, "ID", "the job to show (default: the only one running on this machine)")
      .Bool("--watch", &watch, "refresh until the job ends (Ctrl-C to stop watching; the job goes on)")
      .Int("--interval_ms", &interval_ms, "MS", "how often --watch refreshes", {100, 3600000})
      .String("--controller", &controller, "HOST:PORT",
              "ask the controller at this address (its store port) instead of this machine's status files")
      .String("--token_file", &token_file, "FILE", "with --controller: the job's --token_file")
      .String("--tls_dir", &tls_dir, "DIR",
              "with --controller: this host's TLS folder, for a job started with --tls_dir (the status files name "
              "their own)");
  if (EarlyExit early = ParseSubcommandFlags(flags, args, "status", " (use --job ID)")) return *early;

  std::vector<Target> targets;
  if (!controller.empty()) {
    if (token_file.empty()) {
      Notice("status: --controller needs --token_file (the token the job was started with)");
      return kUsageError;
    }
    auto token = ReadTokenFile(token_file);
    if (!token.ok()) {
      Notice(absl::StrCat("status: ", token.status().message()));
      return kUsageError;
    }
    targets.push_back({job_id, controller, *token, tls_dir});
  } else {
    if (!token_file.empty() || !tls_dir.empty()) {
      Notice(absl::StrCat("status: ", token_file.empty() ? "--tls_dir" : "--token_file", " goes with --controller"));
      return kUsageError;
    }
    const std::string dir = RunDirectory();
    std::vector<std::string> stale;
    auto files = ReadJobStatusFiles(dir, &stale);
    if (!files.ok()) {
      Notice(absl::StrCat("status: ", files.status().message()));
      return 1;
    }
    for (const std::string& path : stale) {
      ::unlink(path.c_str());
      Notice(absl::StrCat("status: removed ", path, ": its controller is gone (killed before it could remove it)"));
    }
    for (const JobStatusFile& file : *files) {
      if (job_id.empty() || file.job_id == job_id) {
        targets.push_back({file.job_id, file.address, file.token, file.tls_dir});
      }
    }
    if (targets.empty()) {
      Notice(job_id.empty() ? absl::StrCat("status: no dslaunch job is running as this user on this machine (",
                                           dir, " has no live job)")
                            : absl::StrCat("status: no running job '", job_id, "' in ", dir));
      return 1;
    }
  }

  if (targets.size() > 1) {  // several jobs and no --job: a line each
    int code = 0;
    for (const Target& target : targets) {
      auto status = Ask(target);
      if (status.ok()) {
        std::printf("%s\n", FormatJobLine(*status).c_str());
      } else {
        std::printf("%-14s %s\n", target.job_id.c_str(), std::string(status.status().message()).c_str());
        code = 1;
      }
    }
    std::printf("(dslaunch status --job ID shows one job)\n");
    return code;
  }

  const bool terminal = ::isatty(STDOUT_FILENO) != 0;
  std::optional<JobState> last_seen;
  for (;;) {
    auto status = Ask(targets[0]);
    if (!status.ok()) {
      // A controller exits as soon as its job ends: --watch may not see the
      // final state, only that the controller it was watching is gone.
      if (last_seen && absl::IsUnavailable(status.status())) {
        std::printf("job %s has ended: its controller is gone (last seen %s)\n", targets[0].job_id.c_str(),
                    StateName(*last_seen).c_str());
        return 0;
      }
      Notice(absl::StrCat("status: ", status.status().message()));
      return 1;
    }
    last_seen = status->state();
    if (watch && terminal) std::fputs("\033[H\033[2J", stdout);  // clear the screen
    std::fputs(FormatJobStatus(*status).c_str(), stdout);
    std::fflush(stdout);
    if (!watch || Finished(status->state())) return 0;
    if (!terminal) std::fputs("\n", stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
}

}  // namespace dslaunch

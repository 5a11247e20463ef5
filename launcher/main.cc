// dslaunch: plans a job's ranks, reaches one dsagent per host, hosts the
// rendezvous store, and runs the job state machine until every rank is done.
//
//   dslaunch --num_nodes 2 --num_gpus 8 --hostfile hosts ./my_trainer --lr 3e-4
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/auth_token.h"
#include "common/control_plane_defaults.h"
#include "common/store_keys.h"
#include "common/gpu_count.h"
#include "common/log.h"
#include "common/net_address.h"
#include "common/version.h"
#include "launcher/agent_fleet.h"
#include "launcher/dry_run.h"
#include "launcher/grpc_agent_client.h"
#include "launcher/job_controller.h"
#include "launcher/job_event_log.h"
#include "launcher/launch_plan.h"
#include "launcher/launcher_options.h"
#include "launcher/node_resolution.h"
#include "launcher/rank_output.h"
#include "launcher/rendezvous_store.h"
#include "runtime/config/config_loader.h"
#include "runtime/config/dsrank_arguments.h"

extern char** environ;

namespace dslaunch {
namespace {

// How long an ordinary call to an agent may take.
constexpr std::chrono::milliseconds kCallTimeout(kDefaultAgentCallTimeoutMs);

constexpr int kUsageError = 2;

void Notice(const std::string& message) {
  std::string line = absl::StrCat("dslaunch: ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

int UsageError(const absl::Status& status) {
  Notice(std::string(status.message()));
  return kUsageError;
}

std::string ThisExecutableDir() {
  std::error_code error;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? "." : exe.parent_path().string();
}

std::string LocalHostname() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

// Forwards SIGINT/SIGTERM/SIGHUP/SIGUSR1 (blocked in every thread) to the controller.
//
// Note [Interruptible planning]
// The forwarder runs from Main's first line. Until EndPlanning() nothing has
// started that must be stopped (no agent, no rank), so a stop signal ends the
// process at once with 128+signal (nothing is on disk to remove: local
// agents get their token on stdin), however long
// planning takes: reading inputs, a static agent that does not answer
// Describe, a large --dry_run. From EndPlanning() until Attach() a signal is
// kept in pending(); after Attach() the controller stops the job.
class SignalForwarder {
 public:
  explicit SignalForwarder(sigset_t signals) : signals_(signals) {
    thread_ = std::thread([this] {
      while (true) {
        int signal_number = 0;
        if (sigwait(&signals_, &signal_number) != 0) continue;
        if (signal_number == SIGUSR2) {
          if (stopping_.load()) return;  // our own shutdown poke
          continue;
        }
        std::lock_guard<std::mutex> lock(mu_);
        if (planning_) ExitWhilePlanning(signal_number);
        if (controller_ != nullptr) {
          controller_->OnSignal(signal_number);
        } else if (pending_ == 0) {
          pending_ = signal_number;
        }
      }
    });
  }
  ~SignalForwarder() {
    stopping_.store(true);
    pthread_kill(thread_.native_handle(), SIGUSR2);
    thread_.join();
  }
  // From here on, signals wait for the controller (Note [Interruptible planning]).
  void EndPlanning() {
    std::lock_guard<std::mutex> lock(mu_);  // waits out an exit in progress
    planning_ = false;
  }
  void Attach(JobController* controller) {
    std::lock_guard<std::mutex> lock(mu_);
    controller_ = controller;
    if (controller_ != nullptr && pending_ != 0) controller_->OnSignal(pending_);
  }
  int pending() {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_;
  }

 private:
  // REQUIRES: mu_ held (EndPlanning cannot return while the process exits).
  [[noreturn]] void ExitWhilePlanning(int signal_number) {
    Notice(absl::StrCat("received SIG", sigabbrev_np(signal_number),
                        " while planning the job; nothing was started"));
    ::_exit(128 + signal_number);
  }

  sigset_t signals_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  bool planning_ = true;                  // guarded by mu_
  JobController* controller_ = nullptr;  // guarded by mu_
  int pending_ = 0;                       // guarded by mu_
  std::thread thread_;
};

bool IsJobFile(const std::string& path) {
  return absl::EndsWith(path, ".cfg") || absl::EndsWith(path, ".yaml") || absl::EndsWith(path, ".yml");
}

absl::StatusOr<std::vector<runtime::ConfigOverride>> ParseOverrides(const std::vector<std::string>& texts) {
  std::vector<runtime::ConfigOverride> overrides;
  for (const std::string& text : texts) {
    auto parsed = runtime::ParseOverride(text);
    if (!parsed.ok()) return parsed.status();
    overrides.push_back(*parsed);
  }
  return overrides;
}

// --validate FILE: a train.cfg (or .yaml) or a bare ds_config (.json), for
// the world the other options describe. Prints the resolved config or every
// problem; starts nothing.
int Validate(const LauncherOptions& options, int world_size) {
  auto overrides = ParseOverrides(options.overrides);
  if (!overrides.ok()) return UsageError(overrides.status());
  const std::string& path = options.validate;
  runtime::WorldShape world{world_size};
  if (absl::EndsWith(path, ".json")) {
    std::vector<std::string> not_yet_supported;
    auto config = runtime::LoadDsConfig(path, *overrides, world, &not_yet_supported);
    if (!config.ok()) {
      Notice(absl::StrCat(path, " is not valid for ", world_size, " rank(s):\n", config.status().message()));
      return kUsageError;
    }
    std::printf("%s is valid for %d rank(s); resolved:\n%s\n", path.c_str(), world_size,
                runtime::DescribeDsConfig(*config).c_str());
    for (const std::string& line : not_yet_supported) std::printf("not yet supported: %s\n", line.c_str());
    return not_yet_supported.empty() ? 0 : kUsageError;
  }
  auto job = runtime::LoadJobConfig(path, *overrides, world);
  if (!job.ok()) {
    Notice(absl::StrCat(path, " is not valid for ", world_size, " rank(s):\n", job.status().message()));
    return kUsageError;
  }
  std::printf("%s is valid for %d rank(s); resolved:\n%s\n", path.c_str(), world_size,
              runtime::DescribeJobConfig(*job).c_str());
  for (const std::string& line : job->not_yet_supported) std::printf("not yet supported: %s\n", line.c_str());
  return job->not_yet_supported.empty() ? 0 : kUsageError;
}

int Main(int argc, char** argv) {
  // Block the stop signals before any thread exists; one thread takes them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&stop_signals, s);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  SetLogProgramName("dslaunch");
  SignalForwarder signals(stop_signals);  // Note [Interruptible planning]

  auto parsed = ParseLauncherOptions(std::vector<std::string>(argv, argv + argc));
  if (!parsed.ok()) {
    Notice(absl::StrCat(parsed.status().message(), " (dslaunch --help lists the options)"));
    return kUsageError;
  }
  LauncherOptions options = *parsed;
  if (options.help) {
    std::cout << LauncherUsage();
    return 0;
  }
  if (options.version) {
    std::cout << VersionLine("dslaunch") << "\n";
    return 0;
  }

  // Everything that can be wrong with the input is checked before anything starts.
  JobSpec spec;
  spec.job_id = options.job_id.empty() ? GenerateToken().substr(0, 12) : options.job_id;
  spec.program = options.program;
  spec.no_local_rank = options.no_local_rank;
  spec.max_restarts = options.max_restarts;
  spec.restart_backoff = std::chrono::milliseconds(options.restart_backoff_ms);
  spec.max_restart_backoff = std::chrono::milliseconds(options.max_restart_backoff_ms);
  spec.stop_grace = std::chrono::milliseconds(options.stop_grace_ms);
  spec.lease = std::chrono::milliseconds(options.lease_ms);
  spec.keepalive_interval =
      std::chrono::milliseconds(std::clamp<int64_t>(options.lease_ms / 4, 100, 1000));
  spec.working_dir = std::filesystem::current_path().string();
  spec.environment.job_id = spec.job_id;
  spec.environment.master_port = options.master_port;
  spec.environment.passthrough = SelectPassthroughVariables(environ);
  if (const char* home = std::getenv("HOME")) {
    absl::Status read = ReadDeepspeedEnvFile(absl::StrCat(home, "/.deepspeed_env"),
                                             &spec.environment.passthrough);
    if (!read.ok()) return UsageError(read);
  }
  if (absl::Status read = ReadDeepspeedEnvFile(".deepspeed_env", &spec.environment.passthrough);
      !read.ok()) {
    return UsageError(read);
  }

  NodeResolutionContext context;
  context.local_gpu_count = DetectLocalGpuCount();
  context.local_hostname = LocalHostname();
  context.default_hostfile_exists = std::filesystem::exists(kDefaultHostfile);

  // Token: required for agents we did not start ourselves.
  bool static_agents = !options.agents.empty();
  std::string token;
  std::string token_file = options.token_file;
  if (!token_file.empty()) {
    auto read = ReadTokenFile(token_file);
    if (!read.ok()) return UsageError(read.status());
    token = *read;
  }

  std::unique_ptr<AgentFleet> fleet;
  std::vector<std::unique_ptr<GrpcAgentClient>> clients;
  std::map<std::string, std::string> dial_host;  // node name -> address to reach it (static)
  if (static_agents) {
    if (token.empty()) {
      return UsageError(absl::InvalidArgumentError(
          "--agents: --token_file is required to talk to agents that are already running"));
    }
    if (options.dry_run) {
      return UsageError(absl::InvalidArgumentError("--dry_run with --agents is not supported: "
                                                   "the slots come from the running agents"));
    }
    auto existing = AgentFleet::Existing(options.agents);
    if (!existing.ok()) return UsageError(existing.status());
    fleet = std::move(*existing);
    // Name each node by the host name its agent reports (what users see in
    // [host:rank]); two agents on one machine fall back to their addresses.
    std::vector<DescribeReply> described;
    for (const auto& endpoint : fleet->endpoints()) {
      GrpcAgentClient probe(endpoint.host, endpoint.address, token);
      auto reply = probe.Describe();
      if (!reply.ok()) {
        Notice(std::string(reply.status().message()));
        return 1;
      }
      described.push_back(*reply);
    }
    std::set<std::string> names;
    for (const auto& reply : described) names.insert(reply.hostname());
    const bool unique = names.size() == described.size() && !names.count("");
    for (size_t i = 0; i < described.size(); ++i) {
      const AgentEndpoint& endpoint = fleet->endpoints()[i];
      std::string name = unique ? described[i].hostname() : endpoint.address;
      clients.push_back(std::make_unique<GrpcAgentClient>(name, endpoint.address, token, kCallTimeout,
                                                          std::chrono::milliseconds(options.lease_ms / 4)));
      dial_host[name] = endpoint.host;
      context.agent_hosts.push_back(name);
      context.agent_gpu_counts.push_back(described[i].gpu_count());
    }
  }

  if (!options.validate.empty() && options.program.empty() && options.agents.empty()) {
    auto nodes = ResolveNodes(options, context);
    if (!nodes.ok()) return UsageError(nodes.status());
    return Validate(options, BuildLaunchPlan(nodes->nodes).world_size());
  }
  auto resolution = ResolveNodes(options, context);
  if (!resolution.ok()) return UsageError(resolution.status());
  if (!resolution->hostfile_used.empty() && !options.hostfile_given) {
    Notice(absl::StrCat("using the hostfile ", resolution->hostfile_used));
  }
  spec.plan = BuildLaunchPlan(resolution->nodes);
  if (!options.program.empty() && IsJobFile(options.program[0])) {
    // The embedded runtime: every rank runs dsrank on the job file. The file
    // is checked for this world before anything starts, with every override:
    // those after the job file (dsrank's own arguments) count as those
    // before it, in the order dsrank applies them (dslaunch's first).
    auto rank_arguments = runtime::ParseDsrankArguments(options.program);
    if (!rank_arguments.ok()) {
      return UsageError(absl::InvalidArgumentError(
          absl::StrCat(options.program[0], ": ", rank_arguments.status().message())));
    }
    std::vector<std::string> override_texts = options.overrides;
    override_texts.insert(override_texts.end(), rank_arguments->overrides.begin(), rank_arguments->overrides.end());
    auto overrides = ParseOverrides(override_texts);
    if (!overrides.ok()) return UsageError(overrides.status());
    const std::string job_file = std::filesystem::absolute(options.program[0]).string();
    // Note [Elastic batch]: an elastic job may adjust a global batch this
    // world size cannot keep (dsrank states it); others must fit as written.
    std::string batch_note;
    auto job = options.min_nodes > 0
                   ? runtime::LoadElasticJobConfig(job_file, *overrides, runtime::WorldShape{spec.plan.world_size()},
                                                   &batch_note)
                   : runtime::LoadJobConfig(job_file, *overrides, runtime::WorldShape{spec.plan.world_size()});
    if (!job.ok()) {
      Notice(absl::StrCat(options.program[0], " is not valid for ", spec.plan.world_size(),
                          " rank(s):\n", job.status().message()));
      return kUsageError;
    }
    if (!job->not_yet_supported.empty()) {
      Notice(absl::StrCat(options.program[0], " asks for what this runtime does not support yet:\n  ",
                          absl::StrJoin(job->not_yet_supported, "\n  ")));
      return kUsageError;
    }
    std::string beside = ThisExecutableDir() + "/dsrank";
    std::vector<std::string> program = {::access(beside.c_str(), X_OK) == 0 ? beside : "dsrank", job_file};
    for (const std::string& text : options.overrides) {
      program.push_back("--override");
      program.push_back(text);
    }
    program.insert(program.end(), options.program.begin() + 1, options.program.end());
    spec.program = program;
    spec.no_local_rank = true;
    spec.preempt_grace = std::chrono::milliseconds(options.preempt_grace_ms);
    spec.hang_timeout = std::chrono::milliseconds(options.hang_timeout_ms);
  } else if (!options.overrides.empty()) {
    return UsageError(absl::InvalidArgumentError(
        "--override changes a job file's keys; it needs a .cfg/.yaml job file as PROGRAM"));
  }
  const bool local = resolution->launcher == LauncherKind::kLocal;
  const std::string& rank0_node = spec.plan.nodes[spec.plan.ranks[0].node_index].host;
  const std::string rank0_host = dial_host.count(rank0_node) ? dial_host[rank0_node] : rank0_node;
  spec.environment.master_addr = !options.master_addr.empty() ? options.master_addr
                                 : local                      ? "127.0.0.1"
                                                              : rank0_host;
  spec.min_nodes = std::max(0, options.min_nodes);
  // Note [Elastic batch]: dsrank may adjust a global batch the world size cannot keep.
  if (spec.min_nodes > 0) spec.environment.passthrough["DSLAUNCH_ELASTIC"] = "1";
  if (options.master_addr.empty()) {
    for (const auto& node : spec.plan.nodes) {
      spec.node_addresses.push_back(local ? "127.0.0.1"
                                          : dial_host.count(node.host) ? dial_host[node.host] : node.host);
    }
  }
  if (options.dry_run) {
    PrintDryRun(spec, resolution->launcher, stdout);
    return 0;
  }
  if (resolution->launcher == LauncherKind::kSsh && token.empty()) {
    return UsageError(absl::InvalidArgumentError(
        "--launcher ssh: --token_file is required (the same file must exist on every host)"));
  }
  // Local agents without --token_file get a token of this run on their stdin
  // (Note [Token on stdin], agent_fleet.cc): no file, nothing left behind.
  if (token.empty()) token = GenerateToken();

  // The rendezvous store, before any rank can need it.
  spec.environment.store_token = GenerateToken();
  RendezvousStore store(spec.job_id, spec.environment.store_token);
  grpc::ServerBuilder builder;
  int store_port = 0;
  builder.AddListeningPort(local ? "127.0.0.1:0" : "0.0.0.0:0", grpc::InsecureServerCredentials(),
                           &store_port);
  store.Serve(builder);
  std::unique_ptr<grpc::Server> store_server = builder.BuildAndStart();
  if (!store_server || store_port == 0) {
    Notice("cannot start the rendezvous store");
    return 1;
  }
  std::string store_host = options.controller_addr;
  if (store_host.empty() && local) store_host = "127.0.0.1";
  if (store_host.empty()) {
    auto toward = LocalAddressToward(rank0_host);
    if (!toward.ok()) {
      Notice(absl::StrCat("cannot tell which address the ranks can reach this machine at (",
                          toward.status().message(), "); pass --controller_addr"));
      return kUsageError;
    }
    store_host = *toward;
  }
  spec.environment.store_addr = HostPort{store_host, store_port}.ToString();

  std::string log_dir_job;
  if (!options.log_dir.empty()) {
    log_dir_job = absl::StrCat(options.log_dir, "/", spec.job_id);
    std::error_code error;
    std::filesystem::create_directories(log_dir_job, error);
    if (error) {
      return UsageError(absl::PermissionDeniedError(
          absl::StrCat("--log_dir: cannot create ", log_dir_job, ": ", error.message())));
    }
  }
  // The job's event log (--log_dir only): opened before anything starts, so
  // an unwritable file is an input error rather than a silent gap.
  std::unique_ptr<FileJobEventLog> event_log;
  if (!log_dir_job.empty()) {
    auto opened = FileJobEventLog::Open(log_dir_job + "/events.jsonl");
    if (!opened.ok()) return UsageError(opened.status());
    event_log = std::move(*opened);
  }

  signals.EndPlanning();  // agents and ranks start from here on
  if (!static_agents) {
    AgentLaunchOptions launch;
    launch.agent_binary = options.agent_binary;
    if (launch.agent_binary.empty()) {
      // Beside dslaunch (build tree, install prefix), else from PATH.
      std::string beside = ThisExecutableDir() + "/dsagent";
      launch.agent_binary = ::access(beside.c_str(), X_OK) == 0 ? beside : "dsagent";
    }
    launch.token_file = token_file;
    launch.token = token;
    launch.lease_ms = options.lease_ms;
    launch.stop_grace_ms = options.stop_grace_ms;
    launch.agent_log_dir = log_dir_job;
    launch.ssh_command = absl::StrSplit(options.ssh_command, ' ', absl::SkipEmpty());
    std::vector<std::string> hosts;
    for (const auto& node : spec.plan.nodes) hosts.push_back(node.host);
    auto started = local ? AgentFleet::StartLocal(hosts, launch)
                         : AgentFleet::StartOverSsh(hosts, launch);
    if (!started.ok()) {
      Notice(std::string(started.status().message()));
      return 1;
    }
    fleet = std::move(*started);
    for (const auto& endpoint : fleet->endpoints()) {
      clients.push_back(std::make_unique<GrpcAgentClient>(endpoint.host, endpoint.address, token, kCallTimeout,
                                                          std::chrono::milliseconds(options.lease_ms / 4)));
      auto described = clients.back()->Describe();
      if (!described.ok()) {
        Notice(std::string(described.status().message()));
        return 1;
      }
    }
  }
  if (int pending = signals.pending(); pending != 0) {
    Notice(absl::StrCat("received SIG", sigabbrev_np(pending), " before the job started"));
    return 128 + pending;
  }

  // Node i of the plan is served by the agent of the same host.
  std::vector<AgentClient*> agents;
  for (const auto& node : spec.plan.nodes) {
    for (const auto& client : clients) {
      if (client->host() == node.host) {
        agents.push_back(client.get());
        break;
      }
    }
  }

  TeeOutput output;
  output.Add(std::make_unique<ConsoleOutput>(options.console_ranks, !options.no_prefix));
  if (!options.log_dir.empty()) {
    output.Add(std::make_unique<LogDirOutput>(options.log_dir, spec.job_id));
  }
  if (spec.preempt_grace.count() > 0) {
    // Note [Preemption]: dsrank polls this key at every step boundary.
    spec.request_checkpoint = [&store](int attempt) {
      store.SetForAttempt(attempt, store_keys::kPreempt, "1");
    };
  }
  if (spec.hang_timeout.count() > 0) {
    spec.read_progress = [&store](int attempt) { return store.GetForAttempt(attempt, store_keys::kProgressStep); };
  }
  // Note [Rank heartbeats]: ranks beat five times per timeout (at most once a
  // second); hang reports go to the log folder, or a folder of the job's own.
  spec.heartbeat_timeout = std::chrono::milliseconds(options.heartbeat_timeout_ms);
  spec.rejoin_check = std::chrono::milliseconds(options.rejoin_check_ms);
  spec.blacklist_after = options.blacklist_after;
  spec.blacklist_cooldown = std::chrono::milliseconds(options.blacklist_cooldown_ms);
  spec.environment.passthrough["DSLAUNCH_HEARTBEAT_MS"] = absl::StrCat(
      options.heartbeat_timeout_ms > 0 ? std::clamp<int64_t>(options.heartbeat_timeout_ms / 5, 100, 1000) : 1000);
  spec.diagnosis_dir = !log_dir_job.empty() ? log_dir_job
                                            : absl::StrCat(std::filesystem::temp_directory_path().string(),
                                                           "/dslaunch-", spec.job_id);
  // Note [Committed checkpoints]: rank 0 of dsrank records each checkpoint
  // every rank has written ("checkpoint/committed"); the controller keeps the
  // newest across attempts and hands it to the next one, which resumes from
  // exactly that tag, never from a partial or unrecorded one.
  std::string last_committed;
  spec.attempt_environment = [&last_committed](int) {
    std::map<std::string, std::string> env;
    if (!last_committed.empty()) env["DSLAUNCH_RESUME_TAG"] = last_committed;
    return env;
  };
  auto on_attempt_over = [&](int attempt) {
    if (auto tag = store.GetForAttempt(attempt, store_keys::kCheckpointCommitted); tag && *tag != last_committed) {
      last_committed = *tag;
      if (event_log != nullptr) {
        event_log->Append(JobEvent("checkpoint_committed").Int("attempt", attempt).Text("tag", last_committed));
      }
    }
    store.DropAttempt(attempt);
  };
  JobController controller(spec, agents, &output, Notice, on_attempt_over, event_log.get());
  signals.Attach(&controller);
  JobOutcome outcome = controller.Run();
  signals.Attach(nullptr);
  if (event_log != nullptr && !event_log->status().ok()) {
    Notice(absl::StrCat("the event log is incomplete: ", event_log->status().message()));
  }

  store.Shutdown();
  store_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  clients.clear();
  fleet.reset();
  return outcome.exit_code;
}

}  // namespace
}  // namespace dslaunch

int main(int argc, char** argv) { return dslaunch::Main(argc, argv); }

// dslaunch: plans a job's ranks, reaches one dsagent per host, hosts the
// rendezvous store, and runs the job state machine until every rank is done.
//
//   dslaunch --num_nodes 2 --num_gpus 8 --hostfile hosts ./my_trainer --lr 3e-4
//
// Main reads as the path of a launch: parse the options → read the inputs
// and reach static agents → plan (with --validate and --dry_run ending
// here) → start the store → start the agents → run the controller → exit
// with its code. Everything that can be wrong with the input is checked
// before anything starts (Note [Interruptible planning]).
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/for_each_concurrently.h"
#include "common/mutex_deadlock_detection.h"
#include "common/auth_token.h"
#include "common/control_plane_defaults.h"
#include "common/exclusive_port.h"
#include "common/gpu_count.h"
#include "common/log.h"
#include "common/net_address.h"
#include "common/rank_contract.h"
#include "common/version.h"
#include "common/prometheus_endpoint.h"
#include "common/tls_files.h"
#include "launcher/agent_fleet.h"
#include "launcher/certs_command.h"
#include "launcher/controller_journal.h"
#include "launcher/controller_status_service.h"
#include "launcher/dry_run.h"
#include "launcher/estimate_command.h"
#include "launcher/report_command.h"
#include "launcher/grpc_agent_client.h"
#include "launcher/job_controller.h"
#include "launcher/job_event_log.h"
#include "launcher/job_file.h"
#include "launcher/job_status_board.h"
#include "launcher/job_status_file.h"
#include "launcher/launch_plan.h"
#include "launcher/launcher_notice.h"
#include "launcher/launcher_options.h"
#include "launcher/node_resolution.h"
#include "launcher/plot_command.h"
#include "launcher/prometheus_metrics.h"
#include "launcher/rank_output.h"
#include "launcher/rendezvous_store.h"
#include "launcher/resume_job.h"
#include "launcher/sibling_binary.h"
#include "launcher/signal_forwarder.h"
#include "launcher/status_command.h"

extern char** environ;

namespace dslaunch {
namespace {

// How long an ordinary call to an agent may take.
constexpr std::chrono::milliseconds kCallTimeout(kDefaultAgentCallTimeoutMs);

// The agents of the job and how to reach them.
struct AgentConnections {
  std::unique_ptr<AgentFleet> fleet;
  std::vector<std::unique_ptr<GrpcAgentClient>> clients;
  std::map<std::string, std::string> dial_host;  // node name -> address to reach it (static)
};

// What planning decided, for the steps that start things.
struct PlannedJob {
  JobSpec spec;
  LauncherKind launcher = LauncherKind::kLocal;
  std::string token;      // empty: none given (local agents get one of this run)
  // Note [Per-job credentials] (common/rpc_auth_policy.h): what this run's
  // job is bound to on every agent. In this process's memory, and in the
  // journal (Note [Controller failover]) only.
  std::string job_credential = GenerateToken();
  // dslaunch --resume_job: the journal of the controller this one replaces.
  std::optional<ResumedJob> resumed;
  std::vector<std::string> command_line;  // dslaunch's argv, for the journal
  // Note [Mutual TLS]: --tls_dir, read at planning; nullopt: plaintext.
  std::optional<TlsFiles> tls;
  const TlsFiles* tls_files() const { return tls ? &*tls : nullptr; }
  std::string rank0_host;  // where rank 0 runs, as this machine dials it
  bool local() const { return launcher == LauncherKind::kLocal; }
};

// The rendezvous store and the gRPC server that serves it, with the job's
// live status (Note [Live job status]) on the same port.
struct StoreServer {
  std::unique_ptr<RendezvousStore> store;
  std::unique_ptr<JobStatusBoard> board;
  std::unique_ptr<ControllerStatusService> status;
  std::unique_ptr<grpc::Server> server;
  ScopedJobStatusFile status_file;  // Note [Job status file]
  std::unique_ptr<PrometheusEndpoint> metrics;
};

std::string LocalHostname() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

EarlyExit ParseCommandLine(int argc, char** argv, LauncherOptions* options) {
  auto parsed = ParseLauncherOptions(std::vector<std::string>(argv, argv + argc));
  if (!parsed.ok()) {
    Notice(absl::StrCat(parsed.status().message(), " (dslaunch --help lists the options)"));
    return kUsageError;
  }
  *options = *parsed;
  if (options->help) {
    std::cout << LauncherUsage();
    return 0;
  }
  if (options->version) {
    std::cout << VersionLine("dslaunch") << "\n";
    return 0;
  }
  return std::nullopt;
}

// The spec's parts that come straight from the options and the environment
// (~/.deepspeed_env, ./.deepspeed_env).
absl::StatusOr<JobSpec> SpecFromOptions(const LauncherOptions& options) {
  JobSpec spec;
  spec.job_id = options.job_id.empty() ? GenerateToken().substr(0, 12) : options.job_id;
  spec.program = options.program;
  spec.no_local_rank = options.no_local_rank;
  spec.max_restarts = options.max_restarts;
  spec.restart_backoff = std::chrono::milliseconds(options.restart_backoff_ms);
  spec.max_restart_backoff = std::chrono::milliseconds(options.max_restart_backoff_ms);
  spec.stop_grace = std::chrono::milliseconds(options.stop_grace_ms);
  spec.bind_cores_to_rank = options.bind_cores_to_rank;
  spec.bind_core_list = options.bind_core_list;
  spec.run_as = options.run_as;
  // Note [Preemption] and hang detection for any program that reports
  // (python/dslaunch, common/heartbeat_sender.h); a job file sets both again.
  spec.hang_timeout = std::chrono::milliseconds(options.hang_timeout_ms);
  if (options.preempt_grace_given) spec.preempt_grace = std::chrono::milliseconds(options.preempt_grace_ms);
  spec.lease = std::chrono::milliseconds(options.lease_ms);
  spec.keepalive_interval = std::chrono::milliseconds(std::clamp<int64_t>(options.lease_ms / 4, 100, 1000));
  spec.working_dir = std::filesystem::current_path().string();
  spec.environment.job_id = spec.job_id;
  spec.environment.master_port = options.master_port;
  spec.environment.passthrough = SelectPassthroughVariables(environ);
  if (const char* home = std::getenv("HOME")) {
    absl::Status read = ReadDeepspeedEnvFile(absl::StrCat(home, "/.deepspeed_env"), &spec.environment.passthrough);
    if (!read.ok()) return read;
  }
  absl::Status read = ReadDeepspeedEnvFile(".deepspeed_env", &spec.environment.passthrough);
  if (!read.ok()) return read;
  return spec;
}

NodeResolutionContext ThisMachine() {
  NodeResolutionContext context;
  context.local_gpu_count = DetectLocalGpuCount();
  if (const char* visible = std::getenv(rank_env::kCudaVisibleDevices)) context.cuda_visible_devices = visible;
  // Note [SLURM]: the allocation --launcher slurm runs in.
  if (const char* nodes = std::getenv("SLURM_JOB_NODELIST")) context.slurm_nodelist = nodes;
  if (const char* gpus = std::getenv("SLURM_GPUS_ON_NODE")) context.slurm_gpus_on_node = gpus;
  if (const char* gpus = std::getenv("SLURM_GPUS_PER_NODE")) context.slurm_gpus_per_node = gpus;
  context.local_hostname = LocalHostname();
  context.default_hostfile_exists = std::filesystem::exists(kDefaultHostfile);
  return context;
}

std::unique_ptr<GrpcAgentClient> ClientFor(const LauncherOptions& options, const std::string& name,
                                           const std::string& address, const PlannedJob& job) {
  return std::make_unique<GrpcAgentClient>(name, address, job.token, job.job_credential,
                                           ChannelCredentialsFor(job.tls_files()), kCallTimeout,
                                           std::chrono::milliseconds(options.lease_ms / 4));
}

// --agents: agents already running. Each node is named by the host name its
// agent reports (what users see in [host:rank]); two agents on one machine
// fall back to their addresses.
EarlyExit ConnectStaticAgents(const LauncherOptions& options, const PlannedJob& job,
                              NodeResolutionContext* context, AgentConnections* agents) {
  const std::string& token = job.token;
  if (token.empty()) {
    return UsageError(absl::InvalidArgumentError(
        "--agents: --token_file is required to talk to agents that are already running"));
  }
  if (options.dry_run) {
    return UsageError(absl::InvalidArgumentError(
        "--dry_run with --agents is not supported: the slots come from the running agents"));
  }
  auto existing = AgentFleet::Existing(options.agents);
  if (!existing.ok()) return UsageError(existing.status());
  agents->fleet = std::move(*existing);
  // Every agent at once (common/for_each_concurrently.h).
  const std::vector<AgentEndpoint>& endpoints = agents->fleet->endpoints();
  std::vector<absl::StatusOr<DescribeReply>> replies(endpoints.size());
  ForEachConcurrently(endpoints.size(), kAgentCallsInFlight, [&](size_t at) {
    replies[at] = GrpcAgentClient(endpoints[at].host, endpoints[at].address, token,
                                  /*job_credential=*/"", ChannelCredentialsFor(job.tls_files()))
                      .Describe();
  });
  std::vector<DescribeReply> described;
  for (const auto& reply : replies) {
    if (!reply.ok()) {
      Notice(std::string(reply.status().message()));
      return kLaunchError;
    }
    described.push_back(*reply);
  }
  std::set<std::string> names;
  for (const auto& reply : described) names.insert(reply.hostname());
  const bool unique = names.size() == described.size() && !names.count("");
  for (size_t i = 0; i < described.size(); ++i) {
    const AgentEndpoint& endpoint = agents->fleet->endpoints()[i];
    std::string name = unique ? described[i].hostname() : endpoint.address;
    agents->clients.push_back(ClientFor(options, name, endpoint.address, job));
    agents->dial_host[name] = endpoint.host;
    context->agent_hosts.push_back(name);
    context->agent_gpu_counts.push_back(described[i].gpu_count());
  }
  return std::nullopt;
}

// MASTER_ADDR and each node's address: --master_addr, loopback for a local
// job, else how this machine dials the node.
void SetAddresses(const LauncherOptions& options, const AgentConnections& agents, PlannedJob* job) {
  JobSpec& spec = job->spec;
  auto dial = [&](const std::string& node) {
    auto it = agents.dial_host.find(node);
    return it != agents.dial_host.end() ? it->second : node;
  };
  job->rank0_host = dial(spec.plan.nodes[spec.plan.ranks[0].node_index].host);
  spec.environment.master_addr = !options.master_addr.empty() ? options.master_addr
                                 : job->local()               ? "127.0.0.1"
                                                              : job->rank0_host;
  if (options.master_addr.empty()) {
    for (const auto& node : spec.plan.nodes) spec.node_addresses.push_back(job->local() ? "127.0.0.1" : dial(node.host));
  }
}

// Nodes → plan → job file → addresses. --validate without a program ends
// here with the config's verdict.
EarlyExit PlanJob(const LauncherOptions& options, const NodeResolutionContext& context,
                  const AgentConnections& agents, PlannedJob* job) {
  auto resolution = ResolveNodes(options, context);
  if (!resolution.ok()) return UsageError(resolution.status());
  // A local job runs on this machine; without GPUs it trains on the CPU.
  const bool local = resolution->launcher == LauncherKind::kLocal;
  const bool ranks_on_cpu = local && context.local_gpu_count == 0;
  if (!options.validate.empty() && options.program.empty() && options.agents.empty()) {
    return ValidateConfigFile(options, BuildLaunchPlan(resolution->nodes).world_size(), ranks_on_cpu, local);
  }
  if (!resolution->hostfile_used.empty() && !options.hostfile_given) {
    Notice(absl::StrCat("using the hostfile ", resolution->hostfile_used));
  }
  if (resolution->visible_devices_used) {
    Notice(absl::StrCat("using CUDA_VISIBLE_DEVICES=", context.cuda_visible_devices,
                        " as this host's slots (as --include localhost:", context.cuda_visible_devices, ")"));
  }
  job->launcher = resolution->launcher;
  job->spec.plan = BuildLaunchPlan(resolution->nodes);
  if (!options.console_ranks.empty() && *options.console_ranks.rbegin() >= job->spec.plan.world_size()) {
    return UsageError(absl::InvalidArgumentError(
        absl::StrCat("--console_ranks names rank ", *options.console_ranks.rbegin(), ", but the job has ",
                     job->spec.plan.world_size(), " rank(s) (0..", job->spec.plan.world_size() - 1, ")")));
  }
  if (absl::Status used = UseJobFileIfGiven(options, &job->spec, ranks_on_cpu, local); !used.ok()) {
    return UsageError(used);
  }
  SetAddresses(options, agents, job);
  job->spec.min_nodes = std::max(0, options.min_nodes);
  // Note [Elastic batch]: dsrank may adjust a global batch the world size cannot keep.
  if (job->spec.min_nodes > 0) job->spec.environment.passthrough[rank_env::kElastic] = "1";
  return std::nullopt;
}

// Options, inputs, static agents and the plan: everything checked before
// anything starts. Ends dslaunch for --validate and --dry_run.
EarlyExit ReadAndPlan(const LauncherOptions& options, PlannedJob* job, AgentConnections* agents) {
  auto spec = SpecFromOptions(options);
  if (!spec.ok()) return UsageError(spec.status());
  job->spec = std::move(*spec);
  NodeResolutionContext context = ThisMachine();
  if (!options.token_file.empty()) {
    auto read = ReadTokenFile(options.token_file);
    if (!read.ok()) return UsageError(read.status());
    job->token = *read;
  }
  if (!options.tls_dir.empty()) {
    auto read = ReadTlsDir(options.tls_dir, "--tls_dir");
    if (!read.ok()) return UsageError(read.status());
    job->tls = std::move(*read);
  }
  if (!options.agents.empty()) {
    if (EarlyExit early = ConnectStaticAgents(options, *job, &context, agents)) return early;
  }
  if (EarlyExit early = PlanJob(options, context, *agents, job)) return early;
  if (options.dry_run) {
    PrintDryRun(job->spec, job->launcher, stdout);
    return 0;
  }
  // Agents dslaunch starts (locally, over ssh or srun) get the token on their
  // stdin (Note [Token on stdin], agent_fleet.cc); without --token_file it is
  // a token of this run: no file on any host, nothing left behind.
  if (job->token.empty()) job->token = GenerateToken();
  return std::nullopt;
}

// The rendezvous store, before any rank can need it; sets where ranks reach it.
EarlyExit StartStore(const LauncherOptions& options, PlannedJob* job, ControllerJournal* journal,
                     StoreServer* store) {
  JobSpec& spec = job->spec;
  spec.environment.store_token = job->resumed ? job->resumed->journaled.identity.store_token : GenerateToken();
  store->store = std::make_unique<RendezvousStore>(spec.job_id, spec.environment.store_token);
  // Note [Controller failover]: the store's write-ahead log is the journal;
  // a controller taking over starts from what the old store held.
  if (job->resumed) store->store->Restore(job->resumed->journaled.store_changes);
  if (journal != nullptr) {
    store->store->RecordChanges([journal](const StoreChange& change) { JournalStoreChange(*journal, change); });
  }
  RendezvousStore* attempts = store->store.get();
  spec.store_token_for_attempt = [attempts](int attempt) { return attempts->TokenForAttempt(attempt); };
  store->board = std::make_unique<JobStatusBoard>(spec.job_id, spec.max_restarts);
  // Note [Job status file]: `dslaunch status` on this machine uses a token
  // of this run; one elsewhere may use the job's --token_file.
  const std::string controller_token = GenerateToken();
  store->status = std::make_unique<ControllerStatusService>(
      store->board.get(), std::vector<std::string>{controller_token, options.token_file.empty() ? "" : job->token});
  JobStatusBoard* board = store->board.get();
  store->store->ObserveSets(store_keys::kCheckpointCommitted,
                            [board](int, const std::string& tag) { board->CheckpointCommitted(tag); });
  // The store listens only where the ranks reach it (and `dslaunch status`
  // finds it): loopback for a job on this machine, else --controller_addr or
  // the address this machine uses toward rank 0's host; never every
  // interface.
  std::string store_host = options.controller_addr;
  if (store_host.empty() && job->local()) store_host = "127.0.0.1";
  if (store_host.empty()) {
    auto toward = LocalAddressToward(job->rank0_host);
    if (!toward.ok()) {
      Notice(absl::StrCat("cannot tell which address the ranks can reach this machine at (",
                          toward.status().message(), "); pass --controller_addr"));
      return kUsageError;
    }
    store_host = *toward;
  }
  // The ranks of a job taken over reach the store where they always did.
  HostPort listen{store_host, 0};
  if (job->resumed) {
    auto journaled = ParseHostPort(job->resumed->journaled.identity.store_address, "the journaled store address");
    if (!journaled.ok()) return UsageError(journaled.status());
    listen = *journaled;
  }
  grpc::ServerBuilder builder;
  int store_port = 0;
  builder.AddListeningPort(listen.ToString(), ServerCredentialsFor(job->tls_files()), &store_port);
  RefusePortSharing(builder);
  store->store->Serve(builder);
  store->status->ServeBeside(builder);
  store->server = builder.BuildAndStart();
  if (job->resumed && (!store->server || store_port == 0)) {
    Notice(absl::StrCat("cannot start the rendezvous store again on ", listen.ToString(),
                        ", where the job's ranks reach it: is its dslaunch still running, or is the port taken?"));
    return kLaunchError;
  }
  if (!store->server || store_port == 0) {
    Notice(absl::StrCat("cannot start the rendezvous store on ", store_host,
                        options.controller_addr.empty() ? "" : " (--controller_addr)",
                        ": not an address of this machine?"));
    return options.controller_addr.empty() ? kLaunchError : kUsageError;
  }
  spec.environment.store_addr = HostPort{listen.host, store_port}.ToString();
  if (journal != nullptr && !job->resumed) {
    JournaledIdentity identity;
    identity.argv = job->command_line;
    identity.job_id = spec.job_id;
    identity.job_credential = job->job_credential;
    identity.store_token = spec.environment.store_token;
    identity.store_address = spec.environment.store_addr;
    identity.working_dir = spec.working_dir;
    JournalJobStart(*journal, identity);
  }
  JobStatusFile file{spec.job_id, spec.environment.store_addr, controller_token, ::getpid(),
                     job->tls ? job->tls->dir : ""};
  auto written = WriteJobStatusFile(RunDirectory(), file);
  if (written.ok()) {
    store->status_file = ScopedJobStatusFile(*written);
  } else {
    Notice(absl::StrCat("`dslaunch status` will not find this job: ", written.status().message()));
  }
  if (!options.metrics_addr.empty()) {
    auto metrics = PrometheusEndpoint::Start(
        options.metrics_addr, [board] { return JobMetricFamilies(board->Snapshot()); }, "--metrics_addr");
    if (!metrics.ok()) return UsageError(metrics.status());
    store->metrics = std::move(*metrics);
    Notice(absl::StrCat("serving the job's metrics at ", store->metrics->url()));
  }
  return std::nullopt;
}

// Note [Controller failover]: dslaunch --resume_job JOB_DIR runs the job's
// own command line, from the folder it ran in, as the job it was: the same
// id, credential and store (StartStore), attached to its running attempt.
EarlyExit ReadJobToTakeOver(LauncherOptions* options, PlannedJob* job) {
  auto resumed = ReadJobToResume(options->resume_job);
  if (!resumed.ok()) return UsageError(resumed.status());
  const JournaledIdentity& identity = resumed->journaled.identity;
  std::error_code error;
  std::filesystem::current_path(identity.working_dir, error);
  if (error) {
    return UsageError(absl::FailedPreconditionError(absl::StrCat(
        "--resume_job: cannot enter ", identity.working_dir, ", where the job ran: ", error.message())));
  }
  *options = resumed->options;
  job->job_credential = identity.job_credential;
  job->command_line = identity.argv;
  Notice(absl::StrCat("taking over job ", identity.job_id, " at its attempt ", resumed->journaled.attempt,
                      " (", resumed->journal_path, ")"));
  job->resumed = std::move(*resumed);
  return std::nullopt;
}

// The running attempt's hosts must be among the agents' now, with the
// attempt's world size (the controller attaches to those hosts only).
EarlyExit CheckTakeOverPlan(const PlannedJob& job) {
  if (!job.resumed) return std::nullopt;
  const JournaledJob& journaled = job.resumed->journaled;
  int world_size = 0;
  for (const std::string& host : journaled.hosts) {
    auto node = std::find_if(job.spec.plan.nodes.begin(), job.spec.plan.nodes.end(),
                             [&](const HostSlots& planned) { return planned.host == host; });
    if (node == job.spec.plan.nodes.end()) {
      Notice(absl::StrCat("--resume_job: attempt ", journaled.attempt, " of job ", journaled.identity.job_id,
                          " runs on ", host, ", which none of the job's agents (--agents) is now"));
      return kLaunchError;
    }
    world_size += static_cast<int>(node->slots.size());
  }
  if (world_size != journaled.world_size) {
    Notice(absl::StrCat("--resume_job: attempt ", journaled.attempt, " of job ", journaled.identity.job_id, " runs ",
                        journaled.world_size, " rank(s), but its hosts' agents now give ", world_size));
    return kLaunchError;
  }
  return std::nullopt;
}

// Note [Controller failover]: the journal of a job run with --journal (a
// new one), or of the job being taken over. Opt-in: it holds the job's
// credential, which otherwise lives in this process's memory only (Note
// [Per-job credentials]); a rank running as this user could read it.
EarlyExit OpenJournal(const LauncherOptions& options, const PlannedJob& job, const std::string& log_dir_job,
                      std::unique_ptr<ControllerJournal>* journal) {
  absl::StatusOr<std::unique_ptr<ControllerJournal>> opened;
  if (job.resumed) {
    opened = ControllerJournal::Reopen(job.resumed->journal_path);
  } else if (options.journal) {
    opened = ControllerJournal::Create(absl::StrCat(log_dir_job, "/", kControllerJournalFile));
  } else {
    return std::nullopt;
  }
  if (!opened.ok()) return UsageError(opened.status());
  *journal = std::move(*opened);
  return std::nullopt;
}

// --log_dir: the job's folder (returned; empty without --log_dir) and its
// event log, opened before anything starts so that an unwritable file is an
// input error rather than a silent gap.
EarlyExit OpenLogDir(const LauncherOptions& options, const std::string& job_id, std::string* log_dir_job,
                     std::unique_ptr<FileJobEventLog>* event_log) {
  if (options.log_dir.empty()) return std::nullopt;
  *log_dir_job = absl::StrCat(options.log_dir, "/", job_id);
  std::error_code error;
  std::filesystem::create_directories(*log_dir_job, error);
  if (error) {
    return UsageError(absl::PermissionDeniedError(
        absl::StrCat("--log_dir: cannot create ", *log_dir_job, ": ", error.message())));
  }
  auto opened = FileJobEventLog::Open(*log_dir_job + "/events.jsonl");
  if (!opened.ok()) return UsageError(opened.status());
  *event_log = std::move(*opened);
  return std::nullopt;
}

// Local or ssh agents, one per node of the plan, each answering Describe.
EarlyExit StartAgents(const LauncherOptions& options, const PlannedJob& job, const std::string& log_dir_job,
                      AgentConnections* agents) {
  AgentLaunchOptions launch;
  launch.agent_binary = options.agent_binary.empty() ? BinaryBesideThisOne("dsagent") : options.agent_binary;
  launch.token_file = options.token_file;
  launch.token = job.token;
  launch.lease_ms = options.lease_ms;
  launch.stop_grace_ms = options.stop_grace_ms;
  launch.agent_log_dir = log_dir_job;
  launch.metrics_addr = options.agent_metrics_addr;
  if (job.tls) launch.tls_dir = job.tls->dir;  // absolute: the same path on every host
  launch.allow_run_as = options.run_as;
  launch.ssh_command = absl::StrSplit(options.ssh_command, ' ', absl::SkipEmpty());
  launch.slurm_command = absl::StrSplit(options.slurm_command, ' ', absl::SkipEmpty());
  std::vector<std::string> hosts;
  for (const auto& node : job.spec.plan.nodes) hosts.push_back(node.host);
  auto started = job.local()                              ? AgentFleet::StartLocal(hosts, launch)
                 : job.launcher == LauncherKind::kSlurm ? AgentFleet::StartOverSlurm(hosts, launch)
                                                        : AgentFleet::StartOverSsh(hosts, launch);
  if (!started.ok()) {
    Notice(std::string(started.status().message()));
    return kLaunchError;
  }
  agents->fleet = std::move(*started);
  for (const auto& endpoint : agents->fleet->endpoints()) {
    agents->clients.push_back(ClientFor(options, endpoint.host, endpoint.address, job));
    auto described = agents->clients.back()->Describe();
    if (!described.ok()) {
      Notice(std::string(described.status().message()));
      return kLaunchError;
    }
  }
  return std::nullopt;
}

// Node i of the plan is served by the agent of the same host.
std::vector<AgentClient*> AgentsInPlanOrder(const LaunchPlan& plan, const AgentConnections& agents) {
  std::vector<AgentClient*> ordered;
  for (const auto& node : plan.nodes) {
    for (const auto& client : agents.clients) {
      if (client->host() == node.host) {
        ordered.push_back(client.get());
        break;
      }
    }
  }
  return ordered;
}

// The spec's parts for watching ranks: preemption and progress through the
// store, heartbeats, membership, and where hang reports go.
void SetHealthChecks(const LauncherOptions& options, const std::string& log_dir_job, RendezvousStore* store,
                     JobSpec* spec) {
  if (spec->preempt_grace.count() > 0) {
    // Note [Preemption]: dsrank polls this key at every step boundary.
    spec->request_checkpoint = [store](int attempt) { store->SetForAttempt(attempt, store_keys::kPreempt, "1"); };
  }
  if (spec->hang_timeout.count() > 0) {
    spec->read_progress = [store](int attempt) { return store->GetForAttempt(attempt, store_keys::kProgressStep); };
  }
  // Note [Rank heartbeats]: ranks beat five times per timeout (at most once a
  // second); hang reports go to the log folder, or a folder of the job's own.
  spec->heartbeat_timeout = std::chrono::milliseconds(options.heartbeat_timeout_ms);
  spec->rejoin_check = std::chrono::milliseconds(options.rejoin_check_ms);
  spec->blacklist_after = options.blacklist_after;
  spec->blacklist_cooldown = std::chrono::milliseconds(options.blacklist_cooldown_ms);
  spec->environment.passthrough[rank_env::kHeartbeatMs] = absl::StrCat(
      options.heartbeat_timeout_ms > 0 ? std::clamp<int64_t>(options.heartbeat_timeout_ms / 5, 100, 1000) : 1000);
  spec->diagnosis_dir = !log_dir_job.empty()
                            ? log_dir_job
                            : absl::StrCat(std::filesystem::temp_directory_path().string(), "/dslaunch-", spec->job_id);
}

// Runs the job to its end; returns dslaunch's exit code.
int RunJob(const LauncherOptions& options, JobSpec spec, const std::vector<AgentClient*>& agents,
           const std::string& log_dir_job, RendezvousStore* store, JobStatusBoard* board,
           FileJobEventLog* file_log, ControllerJournal* journal, const std::optional<ResumedJob>& resumed,
           SignalForwarder* signals) {
  // Note [Controller failover]: with a journal, the events a takeover needs
  // go into it too.
  std::optional<JournalingEventLog> journaling;
  if (journal != nullptr) journaling.emplace(file_log, journal);
  JobEventLog* event_log = journaling ? static_cast<JobEventLog*>(&*journaling) : file_log;
  TeeOutput output;
  output.Add(std::make_unique<ConsoleOutput>(options.console_ranks, !options.no_prefix));
  if (!options.log_dir.empty()) output.Add(std::make_unique<LogDirOutput>(options.log_dir, spec.job_id));
  SetHealthChecks(options, log_dir_job, store, &spec);
  // Note [Committed checkpoints]: rank 0 of dsrank records each checkpoint
  // every rank has written ("checkpoint/committed"); the controller keeps the
  // newest across attempts and hands it to the next one, which resumes from
  // exactly that tag, never from a partial or unrecorded one.
  std::string last_committed = resumed ? resumed->journaled.committed_tag : "";
  if (resumed) {
    spec.resume = JobSpec::Resume{resumed->journaled.attempt, resumed->journaled.ended, resumed->journaled.hosts};
  }
  spec.attempt_environment = [&last_committed](int) {
    std::map<std::string, std::string> env;
    if (!last_committed.empty()) env[rank_env::kResumeTag] = last_committed;
    return env;
  };
  auto on_attempt_over = [&](int attempt) {
    if (auto tag = store->GetForAttempt(attempt, store_keys::kCheckpointCommitted); tag && *tag != last_committed) {
      last_committed = *tag;
      if (event_log != nullptr) {
        event_log->Append(JobEvent("checkpoint_committed").Int("attempt", attempt).Text("tag", last_committed));
      }
    }
    store->DropAttempt(attempt);
  };
  JobController controller(spec, agents, &output, Notice, on_attempt_over, event_log);
  controller.PublishStatusTo(board);
  signals->Attach(&controller);
  JobOutcome outcome = controller.Run();
  signals->Attach(nullptr);
  if (file_log != nullptr && !file_log->status().ok()) {
    Notice(absl::StrCat("the event log is incomplete: ", file_log->status().message()));
  }
  if (journal != nullptr && !journal->status().ok()) {
    Notice(absl::StrCat("the controller journal is incomplete (--resume_job may not be able to take this job "
                        "over): ", journal->status().message()));
  }
  return outcome.exit_code;
}

int Main(int argc, char** argv) {
  TurnOffMutexDeadlockDetection();
  // `dslaunch estimate ...` (Note [Memory estimate]): nothing is launched.
  if (argc > 1 && std::string(argv[1]) == "estimate") {
    return RunEstimateCommand(std::vector<std::string>(argv + 2, argv + argc));
  }
  // `dslaunch report` (ds_report): the host's and the runtime's facts.
  if (argc > 1 && std::string(argv[1]) == "report") {
    return RunReportCommand(std::vector<std::string>(argv + 2, argv + argc));
  }
  // `dslaunch plot RUN_DIR` (Note [Plots]): the monitors' curves as a PNG and a page.
  if (argc > 1 && std::string(argv[1]) == "plot") {
    return RunPlotCommand(std::vector<std::string>(argv + 2, argv + argc));
  }
  // `dslaunch certs` (Note [Mutual TLS]): a CA and a TLS folder per host.
  if (argc > 1 && std::string(argv[1]) == "certs") {
    return RunCertsCommand(std::vector<std::string>(argv + 2, argv + argc));
  }
  // `dslaunch status` (Note [Live job status]): asks a running controller.
  if (argc > 1 && std::string(argv[1]) == "status") {
    return RunStatusCommand(std::vector<std::string>(argv + 2, argv + argc));
  }
  // Block the stop signals before any thread exists; one thread takes them.
  const sigset_t stop_signals = BlockStopSignals();
  ::signal(SIGPIPE, SIG_IGN);
  SetLogProgramName("dslaunch");
  SignalForwarder signals(stop_signals, Notice);  // Note [Interruptible planning]

  LauncherOptions options;
  if (EarlyExit early = ParseCommandLine(argc, argv, &options)) return *early;
  PlannedJob job;
  job.command_line.assign(argv, argv + argc);
  if (!options.resume_job.empty()) {
    if (EarlyExit early = ReadJobToTakeOver(&options, &job)) return *early;
  }
  AgentConnections agents;
  if (EarlyExit early = ReadAndPlan(options, &job, &agents)) return *early;
  if (EarlyExit early = CheckTakeOverPlan(job)) return *early;
  std::string log_dir_job;
  std::unique_ptr<FileJobEventLog> event_log;
  if (EarlyExit early = OpenLogDir(options, job.spec.job_id, &log_dir_job, &event_log)) return *early;
  std::unique_ptr<ControllerJournal> journal;
  if (EarlyExit early = OpenJournal(options, job, log_dir_job, &journal)) return *early;
  StoreServer store;
  if (EarlyExit early = StartStore(options, &job, journal.get(), &store)) return *early;

  signals.EndPlanning();  // agents and ranks start from here on
  if (options.agents.empty()) {
    if (EarlyExit early = StartAgents(options, job, log_dir_job, &agents)) return *early;
  }
  if (int pending = signals.pending(); pending != 0) {
    Notice(absl::StrCat("received SIG", sigabbrev_np(pending), " before the job started"));
    return 128 + pending;
  }
  const int exit_code = RunJob(options, job.spec, AgentsInPlanOrder(job.spec.plan, agents), log_dir_job,
                               store.store.get(), store.board.get(), event_log.get(), journal.get(), job.resumed,
                               &signals);
  store.store->Shutdown();
  store.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  agents.clients.clear();
  agents.fleet.reset();
  return exit_code;
}

}  // namespace
}  // namespace dslaunch

int main(int argc, char** argv) { return dslaunch::Main(argc, argv); }

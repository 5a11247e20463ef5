// dsagent: the per-host daemon that starts and supervises rank processes for
// an authenticated dslaunch controller.
//
//   dsagent --listen 127.0.0.1:29700 --token_file ~/.dslaunch/token
//
// dslaunch hands the agents it starts on this machine their token on stdin
// (--token_stdin): no copy of it is ever written to a file, so none is left
// behind whatever way dslaunch ends (SIGKILL included).
//
// On start it prints one line "DSAGENT_READY <host:port>" on stdout (the local
// and ssh launchers read the port from it). SIGTERM or SIGINT stops every rank
// it runs and exits.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/agent_service.h"
#include "common/mutex_deadlock_detection.h"
#include "common/auth_token.h"
#include "common/exclusive_port.h"
#include "common/control_plane_defaults.h"
#include "common/control_plane_limits.h"
#include "agent/agent_metrics.h"
#include "agent/ssh_listen_address.h"
#include "common/flag_table.h"
#include "common/prometheus_endpoint.h"
#include "common/gpu_count.h"
#include "common/log.h"
#include "common/net_address.h"
#include "common/tls_files.h"

namespace {

struct AgentFlags {
  std::string listen = "127.0.0.1:0";
  std::string token_file;
  bool token_stdin = false;
  int64_t lease_ms = dslaunch::kDefaultLeaseMs;
  int64_t stop_grace_ms = dslaunch::kDefaultStopGraceMs;
  std::string name;
  std::string keeper;  // empty: dsagent_keeper beside this binary
  bool exit_on_stdin_eof = false;
  std::string metrics_addr;  // empty: no /metrics
  bool listen_on_ssh_address = false;
  std::string tls_dir;  // Note [Mutual TLS]; empty: plaintext
  std::string run_as;   // Note [Ranks as another user]; empty: ranks run as the agent
  std::string allow_run_as;  // USER[,USER...] a job may ask for (dslaunch --run_as)
};

// dsagent's flags: parsing and --help from one table.
dslaunch::FlagTable AgentFlagTable(AgentFlags& flags) {
  dslaunch::FlagTable table("dsagent", "dsagent --token_file FILE | --token_stdin [flags]");
  table
      .String("--listen", &flags.listen, "ADDR:PORT",
              "where to serve (port 0: a free one)")
      .String("--token_file", &flags.token_file, "FILE",
              "the shared secret every call must carry (mode 0600)")
      .Bool("--token_stdin", &flags.token_stdin,
            "read the secret from the first line of stdin instead (dslaunch's local agents: the "
            "token never touches a disk)")
      .Int("--lease_ms", &flags.lease_ms, "MS",
           "stop a job's ranks after this long without its controller",
           {dslaunch::kMinLeaseMs, dslaunch::kMaxLeaseMs})
      .Int("--stop_grace_ms", &flags.stop_grace_ms, "MS",
           "SIGTERM -> SIGKILL grace when a lease expires or the agent stops",
           {0, dslaunch::kMaxStopGraceMs})
      .String("--name", &flags.name, "NAME", "host name to report and log (default: the machine's)")
      .String("--keeper", &flags.keeper, "PATH",
              "the per-rank keeper (default: dsagent_keeper beside dsagent)")
      .Bool("--exit_on_stdin_eof", &flags.exit_on_stdin_eof,
            "stop everything and exit when stdin closes (ssh launcher)")
      .Bool("--listen_on_ssh_address", &flags.listen_on_ssh_address,
            "listen on a free port of the address the ssh connection came in at (SSH_CONNECTION; the ssh launcher)")
      .String("--metrics_addr", &flags.metrics_addr, "HOST:PORT",
              "serve Prometheus /metrics of this host's ranks there (port 0: a free one; no authentication)")
      .String("--tls_dir", &flags.tls_dir, "DIR",
              "mutual TLS: ca.crt, tls.crt, tls.key (dslaunch certs makes them); ranks get it too")
      .String("--run_as", &flags.run_as, "USER",
              "run every rank as USER (the agent runs as root): ranks cannot read the agent's token or signal it")
      .String("--allow_run_as", &flags.allow_run_as, "USER[,USER...]",
              "users a job may ask its ranks to run as (dslaunch --run_as); the agent runs as root");
  return table;
}

// The folder of this executable (/proc/self/exe), where dsagent_keeper is installed.
std::string ThisExecutableDir() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return ".";
  std::string text(path, static_cast<size_t>(n));
  size_t slash = text.rfind('/');
  return slash == std::string::npos ? "." : text.substr(0, slash);
}

// --token_stdin: the first line of `fd`, read byte by byte so that nothing
// after it is taken from the stream (--exit_on_stdin_eof reads on).
absl::StatusOr<std::string> ReadTokenLine(int fd) {
  constexpr size_t kMaxTokenBytes = 4096;
  std::string line;
  while (line.size() <= kMaxTokenBytes) {
    char c = 0;
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(absl::StrCat("--token_stdin: cannot read stdin: ", std::strerror(errno)));
    if (n == 0 || c == '\n') break;
    line.push_back(c);
  }
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (line.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--token_stdin: the first line of stdin is longer than ",
                                                   kMaxTokenBytes, " bytes"));
  }
  if (line.empty()) return absl::InvalidArgumentError("--token_stdin: stdin gave no token (an empty first line)");
  if (absl::Status strong = dslaunch::CheckTokenStrength(line); !strong.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--token_stdin: ", strong.message()));
  }
  return line;
}

int Fail(const std::string& message) {
  std::cerr << "dsagent: " << message << "\n(dsagent --help lists the flags)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  dslaunch::TurnOffMutexDeadlockDetection();
  AgentFlags flags;
  dslaunch::FlagTable table = AgentFlagTable(flags);
  if (absl::Status parsed = table.Parse(std::vector<std::string>(argv + 1, argv + argc)); !parsed.ok()) {
    return Fail(std::string(parsed.message()));
  }
  if (table.help_requested()) {
    std::cout << table.Help();
    return 0;
  }
  if (table.version_requested()) {
    std::cout << table.Version() << "\n";
    return 0;
  }
  if (!table.positionals().empty()) {
    return Fail(absl::StrCat("unexpected argument '", table.positionals().front(), "'"));
  }
  if (flags.token_file.empty() == !flags.token_stdin) return Fail("one of --token_file and --token_stdin is required");
  auto listen = dslaunch::ParseHostPort(flags.listen, "--listen");
  if (!listen.ok()) return Fail(std::string(listen.status().message()));
  if (flags.listen_on_ssh_address) {
    auto host = dslaunch::ListenHostFromSshConnection(std::getenv("SSH_CONNECTION"));
    if (!host.ok()) return Fail(std::string(host.status().message()));
    *listen = dslaunch::HostPort{*host, 0};
  }
  auto token = flags.token_stdin ? ReadTokenLine(STDIN_FILENO) : dslaunch::ReadTokenFile(flags.token_file);
  if (!token.ok()) return Fail(std::string(token.status().message()));
  // Note [Mutual TLS]: read now, so that a bad folder is an error at start.
  std::optional<dslaunch::TlsFiles> tls;
  if (!flags.tls_dir.empty()) {
    auto read = dslaunch::ReadTlsDir(flags.tls_dir, "--tls_dir");
    if (!read.ok()) return Fail(std::string(read.status().message()));
    tls = std::move(*read);
  }

  // Note [Rank keeper]: no rank starts without one, so its absence is an
  // error now, not at the first job.
  if (flags.keeper.empty()) flags.keeper = ThisExecutableDir() + "/dsagent_keeper";
  if (::access(flags.keeper.c_str(), X_OK) != 0) {
    return Fail(absl::StrCat("cannot execute the rank keeper ", flags.keeper, " (", std::strerror(errno),
                             "); install dsagent_keeper beside dsagent or pass --keeper PATH"));
  }

  if (flags.name.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    flags.name = host;
  }
  dslaunch::SetLogProgramName(absl::StrCat("dsagent[", flags.name, "]"));

  // Block the stop signals in every thread (gRPC's included); one thread
  // waits for them. Ranks get an empty mask back (process_spawner.cc).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  dslaunch::AgentConfig config;
  config.token = *token;
  config.default_lease = std::chrono::milliseconds(flags.lease_ms);
  config.lease_stop_grace = std::chrono::milliseconds(flags.stop_grace_ms);
  config.hostname = flags.name;
  config.gpu_count = dslaunch::DetectLocalGpuCount();
  config.keeper_path = flags.keeper;
  if (tls) config.tls_dir = tls->dir;  // absolute: ranks start in other folders
  if (!flags.run_as.empty()) {
    auto user = dslaunch::ResolveRunAsUser(flags.run_as);
    if (!user.ok()) return Fail(std::string(user.status().message()));
    if (absl::Status can = dslaunch::CheckCanRunAs(*user); !can.ok()) return Fail(std::string(can.message()));
    config.run_as = std::move(*user);
  }
  for (absl::string_view name : absl::StrSplit(flags.allow_run_as, ',', absl::SkipWhitespace())) {
    auto user = dslaunch::ResolveRunAsUser(std::string(absl::StripAsciiWhitespace(name)));
    if (!user.ok()) return Fail(absl::StrCat("--allow_run_as: ", user.status().message()));
    if (absl::Status can = dslaunch::CheckCanRunAs(*user); !can.ok()) {
      return Fail(absl::StrCat("--allow_run_as: ", can.message()));
    }
    config.allowed_run_as.push_back(std::move(*user));
  }
  auto service = std::make_unique<dslaunch::AgentService>(config);

  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(listen->ToString(), dslaunch::ServerCredentialsFor(tls ? &*tls : nullptr), &bound_port);
  dslaunch::RefusePortSharing(builder);
  // Notice a controller whose connection died (a cut link) within seconds.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  service->Serve(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    return Fail(absl::StrCat("cannot listen on ", listen->ToString(),
                             ": the address is not this machine's, or the port is taken (another dsagent or "
                             "program listens there; agents never share a port)"));
  }
  dslaunch::HostPort bound{listen->host, bound_port};
  // Ranks run on this host: a wildcard listen address is reached on loopback.
  const bool wildcard = listen->host == "0.0.0.0" || listen->host == "::" || listen->host == "[::]";
  service->SetRankContactAddress(
      wildcard ? dslaunch::HostPort{"127.0.0.1", bound_port}.ToString() : bound.ToString());
  std::printf("DSAGENT_READY %s\n", bound.ToString().c_str());
  std::fflush(stdout);
  dslaunch::LogLine(absl::StrCat("listening on ", bound.ToString(), ", lease ", flags.lease_ms,
                                 " ms, ", config.gpu_count, " GPU(s)"));
  std::unique_ptr<dslaunch::PrometheusEndpoint> metrics;  // goes before the service it reads
  if (!flags.metrics_addr.empty()) {
    dslaunch::AgentService* reported = service.get();
    auto started = dslaunch::PrometheusEndpoint::Start(
        flags.metrics_addr, [reported] { return dslaunch::AgentMetricFamilies(reported->Report()); },
        "--metrics_addr");
    if (!started.ok()) {
      server->Shutdown();
      return Fail(std::string(started.status().message()));
    }
    metrics = std::move(*started);
    dslaunch::LogLine(absl::StrCat("serving this host's rank metrics at ", metrics->url()));
  }

  if (flags.exit_on_stdin_eof) {
    std::thread([] {
      char buffer[256];
      while (::read(STDIN_FILENO, buffer, sizeof(buffer)) > 0) {
      }
      dslaunch::LogLine("stdin closed (controller connection gone); shutting down");
      ::kill(::getpid(), SIGTERM);
    }).detach();
  }

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  dslaunch::LogLine(absl::StrCat("received ", strsignal(signal_number), "; stopping every rank"));
  service->StopAllJobs(std::chrono::milliseconds(flags.stop_grace_ms),
                       absl::StrCat("agent received ", strsignal(signal_number)));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  metrics.reset();
  service.reset();
  return 0;
}

// dsagent_sim: many simulated agents in one process, for the control plane's
// scale benchmark (Note [Agent simulator], simulated_agent.h;
// scripts/control-plane-scale.sh drives it).
//
//   dsagent_sim --agents 1000 --ranks_per_agent 8 --address_file A --report R
//   dslaunch --agents "$(cat A)" --token_file T --num_gpus 8 /bin/true
//
// It writes the agents' addresses (host:port,...) to --address_file once all
// listen; then it waits for the controller to start every rank, lets the
// ranks rendezvous on the controller's store, sends heartbeats for --hold_ms,
// and ends the job: --fail_agent's local rank 0 crashes (the controller must
// stop every other rank), or, without it, every rank exits 0. Once every rank
// has ended it writes --report (key=value lines, wall-clock microseconds)
// and serves until SIGTERM or SIGINT.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/mutex_deadlock_detection.h"
#include "common/exclusive_port.h"
#include "common/flag_table.h"
#include "tests/scale/simulated_agent.h"

namespace {

using dslaunch::scale::NowUnixMicros;
using dslaunch::scale::SimulatedAgent;
using dslaunch::scale::SimulationCounters;

int Fail(const std::string& message) {
  std::cerr << "dsagent_sim: " << message << "\n";
  return 2;
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    out << content;
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", partial));
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", partial, " to ", path));
  }
  return absl::OkStatus();
}

// What /proc says of the controller: CPU seconds so far, peak memory, threads.
struct ProcessSample {
  bool valid = false;
  double cpu_seconds = 0;
  int64_t peak_rss_kib = 0;
  int64_t threads = 0;
};

ProcessSample SampleProcess(int64_t pid) {
  ProcessSample sample;
  if (pid <= 0) return sample;
  std::ifstream stat_file(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const size_t after_name = stat.rfind(')');
  if (after_name == std::string::npos) return sample;
  std::vector<std::string> fields = absl::StrSplit(stat.substr(after_name + 2), ' ');
  // Fields 14 and 15 of proc(5) (utime, stime) are 11 and 12 after the name.
  int64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return sample;
  }
  sample.cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(status, line);) {
    std::vector<std::string> words = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.size() < 2) continue;
    if (words[0] == "VmHWM:") (void)absl::SimpleAtoi(words[1], &sample.peak_rss_kib);
    if (words[0] == "Threads:") (void)absl::SimpleAtoi(words[1], &sample.threads);
  }
  sample.valid = true;
  return sample;
}

int64_t ReadPid(const std::string& path) {
  if (path.empty()) return 0;
  std::ifstream in(path);
  int64_t pid = 0;
  in >> pid;
  return pid;
}

}  // namespace

int main(int argc, char** argv) {
  dslaunch::TurnOffMutexDeadlockDetection();
  int64_t agents = 0;
  int64_t ranks_per_agent = 8;
  std::string address_file;
  std::string report_file;
  int64_t heartbeat_ms = 1000;
  int64_t hold_ms = 3000;
  int64_t fail_agent = -1;
  std::string controller_pid_file;
  int64_t timeout_s = 600;
  dslaunch::FlagTable flags("dsagent_sim", "dsagent_sim --agents N --address_file FILE --report FILE [flags]");
  flags.Int("--agents", &agents, "N", "simulated agents (hosts), each on a port of its own", {1, 20000})
      .Int("--ranks_per_agent", &ranks_per_agent, "M", "GPUs each agent reports (its tensor-parallel group)", {1, 1024})
      .String("--address_file", &address_file, "FILE", "where to write host:port,... once every agent listens")
      .String("--report", &report_file, "FILE", "where to write the run's timings once every rank has ended")
      .Int("--heartbeat_ms", &heartbeat_ms, "MS", "each rank's heartbeat interval (dslaunch's default)", {10, 60000})
      .Int("--hold_ms", &hold_ms, "MS", "how long the ranks run (and send heartbeats) past rendezvous", {0, 3600000})
      .Int("--fail_agent", &fail_agent, "I", "this agent's local rank 0 crashes after --hold_ms; -1: the job succeeds", {-1, 20000})
      .String("--controller_pid_file", &controller_pid_file, "FILE", "the controller's pid, to sample its CPU time, memory and threads")
      .Int("--timeout_s", &timeout_s, "S", "give up (exit 1) when the job has not ended by then", {1, 86400});
  absl::Status parsed = flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.ok()) return Fail(std::string(parsed.message()));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (agents == 0 || address_file.empty() || report_file.empty()) {
    return Fail("--agents, --address_file and --report are required");
  }
  if (fail_agent >= agents) return Fail(absl::StrCat("--fail_agent ", fail_agent, " is not one of the ", agents, " agents"));

  // SIGTERM and SIGINT are taken by sigwait at the end, never by a handler.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  SimulationCounters counters;
  std::vector<std::unique_ptr<SimulatedAgent>> fleet;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::vector<std::string> addresses;
  for (int index = 0; index < agents; ++index) {
    fleet.push_back(std::make_unique<SimulatedAgent>(index, static_cast<int>(ranks_per_agent), &counters));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    dslaunch::RefusePortSharing(builder);
    builder.RegisterService(fleet.back().get());
    servers.push_back(builder.BuildAndStart());
    if (!servers.back() || port == 0) return Fail(absl::StrCat("agent ", index, " cannot listen on 127.0.0.1"));
    addresses.push_back(absl::StrCat("127.0.0.1:", port));
  }
  if (absl::Status written = WriteFileAtomically(address_file, absl::StrJoin(addresses, ",") + "\n");
      !written.ok()) {
    return Fail(std::string(written.message()));
  }
  const int64_t total_ranks = agents * ranks_per_agent;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  auto wait_for = [&](auto done) {
    std::unique_lock<std::mutex> lock(counters.mu);
    return counters.changed.wait_until(lock, deadline, done);
  };

  // 1. Every rank started and through rendezvous (or failed it).
  bool rendezvous = wait_for([&] {
    return counters.ranks_started.load() == total_ranks &&
           counters.ranks_past_rendezvous.load() + counters.ranks_failed_rendezvous.load() +
                   counters.ranks_ended.load() >= total_ranks;
  });
  // 2. The ranks run and send heartbeats.
  const int64_t controller_pid = ReadPid(controller_pid_file);
  const ProcessSample before_hold = SampleProcess(controller_pid);
  const auto hold_start = std::chrono::steady_clock::now();
  int64_t heartbeat_rounds = 0;
  const int64_t events_before_hold = counters.watch_events.load();
  if (rendezvous && counters.ranks_failed_rendezvous.load() == 0) {
    // A simulation timer, not a wait for an event: the ranks' steps take time.
    for (auto next = hold_start; next < hold_start + std::chrono::milliseconds(hold_ms);
         next += std::chrono::milliseconds(heartbeat_ms)) {
      std::this_thread::sleep_until(next);
      ++heartbeat_rounds;
      for (auto& agent : fleet) agent->SendHeartbeats(heartbeat_rounds);
    }
    std::this_thread::sleep_until(hold_start + std::chrono::milliseconds(hold_ms));
  }
  const double hold_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - hold_start).count();
  const ProcessSample after_hold = SampleProcess(controller_pid);
  const int64_t heartbeat_events = counters.watch_events.load() - events_before_hold;

  // 3. The job ends: a crash, or every rank done.
  const int64_t end_us = NowUnixMicros();
  if (fail_agent >= 0) {
    fleet[fail_agent]->FailRank(0);
  } else {
    for (auto& agent : fleet) agent->EndEveryRank();
  }
  const bool ended = wait_for([&] { return counters.ranks_ended.load() >= counters.ranks_started.load(); });
  const int64_t all_ended_us = NowUnixMicros();

  std::ostringstream report;
  report << "agents=" << agents << "\n"
         << "ranks_per_agent=" << ranks_per_agent << "\n"
         << "ranks_started=" << counters.ranks_started.load() << "\n"
         << "ranks_past_rendezvous=" << counters.ranks_past_rendezvous.load() << "\n"
         << "ranks_failed_rendezvous=" << counters.ranks_failed_rendezvous.load() << "\n"
         << "ranks_ended=" << counters.ranks_ended.load() << "\n"
         << "first_call_us=" << counters.first_call_us.load() << "\n"
         << "last_describe_us=" << counters.last_describe_us.load() << "\n"
         << "first_watch_us=" << counters.first_watch_us.load() << "\n"
         << "first_start_ranks_us=" << counters.first_start_ranks_us.load() << "\n"
         << "last_start_ranks_us=" << counters.last_start_ranks_us.load() << "\n"
         << "rendezvous_done_us=" << counters.rendezvous_done_us.load() << "\n"
         << "store_calls=" << counters.store_calls.load() << "\n"
         << "end_us=" << end_us << "\n"
         << "failed_agent=" << fail_agent << "\n"
         << "last_stop_us=" << counters.last_stop_us.load() << "\n"
         << "stop_calls=" << counters.stop_calls.load() << "\n"
         << "all_ended=" << (ended ? 1 : 0) << "\n"
         << "all_ended_us=" << all_ended_us << "\n"
         << "heartbeat_rounds=" << heartbeat_rounds << "\n"
         << "heartbeat_events=" << heartbeat_events << "\n"
         << "hold_seconds=" << hold_seconds << "\n";
  const ProcessSample controller_at_end = SampleProcess(controller_pid);
  const ProcessSample simulator_at_end = SampleProcess(getpid());
  report << "simulator_cpu_s=" << simulator_at_end.cpu_seconds << "\n";
  if (controller_at_end.valid) report << "controller_cpu_s=" << controller_at_end.cpu_seconds << "\n";
  if (before_hold.valid && after_hold.valid) {
    report << "controller_cpu_during_hold_s=" << after_hold.cpu_seconds - before_hold.cpu_seconds << "\n"
           << "controller_peak_rss_kib=" << after_hold.peak_rss_kib << "\n"
           << "controller_threads=" << after_hold.threads << "\n";
  }
  {
    std::lock_guard<std::mutex> lock(counters.mu);
    if (!counters.first_rendezvous_error.empty()) {
      report << "rendezvous_error=" << counters.first_rendezvous_error << "\n";
    }
  }
  if (absl::Status written = WriteFileAtomically(report_file, report.str()); !written.ok()) {
    return Fail(std::string(written.message()));
  }
  if (!rendezvous || !ended) {
    std::cerr << "dsagent_sim: the job did not " << (rendezvous ? "end" : "get past rendezvous")
              << " within --timeout_s " << timeout_s << "\n"
              << report.str();
    return 1;
  }

  int signal = 0;
  sigwait(&stop_signals, &signal);
  for (auto& server : servers) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}

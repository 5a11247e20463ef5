// An in-memory AgentClient for controller tests: ranks "run" until the test
// or a scripted behaviour ends them; StopJob ends every running rank as the
// real agent would (stopped_by_agent, SIGTERM). Thread-safe.
#pragma once

#include <signal.h>

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/time/clock.h"
#include "common/start_ranks_environment.h"
#include "launcher/agent_client.h"

namespace dslaunch {

class FakeAgentClient final : public AgentClient {
 public:
  explicit FakeAgentClient(std::string host) : host_(std::move(host)) {}

  // Decides, per started rank, whether it ends at once (and how). nullopt: it
  // keeps running until StopJob or EndRank.
  std::function<std::optional<RankEnded>(int attempt, const RankSpec& rank)> behaviour;
  absl::Status start_error;  // StartRanks fails with this when set
  absl::Status watch_error;  // StartWatch fails with this when set
  int port_to_reserve = 29555;

  const std::string& host() const override { return host_; }
  absl::StatusOr<DescribeReply> Describe() override { return DescribeReply(); }
  absl::StatusOr<int> ReservePort() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++reserve_calls_;
    return port_to_reserve;
  }
  absl::Status StartRanks(const StartRanksRequest& request) override {
    std::vector<std::pair<int, RankEnded>> immediate;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sent_.push_back(request);
      // As the agent runs them: every rank with its whole environment.
      StartRanksRequest as_started = request;
      for (RankSpec& rank : *as_started.mutable_ranks()) {
        auto env = StartRanksEnvironment(request, rank);
        rank.mutable_env()->clear();
        rank.mutable_env()->insert(env.begin(), env.end());
      }
      starts_.push_back(std::move(as_started));
      if (!start_error.ok()) return start_error;
      for (const RankSpec& rank : request.ranks()) {
        running_[{request.attempt(), rank.global_rank()}] = true;
      }
    }
    for (const RankSpec& rank : request.ranks()) {
      RankEvent started;
      started.set_attempt(request.attempt());
      started.set_global_rank(rank.global_rank());
      started.mutable_started()->set_pid(1000 + rank.global_rank());
      Deliver(started);
      if (behaviour) {
        if (auto end = behaviour(request.attempt(), rank)) {
          immediate.emplace_back(rank.global_rank(), *end);
        }
      }
    }
    for (auto& [rank, end] : immediate) EndRank(request.attempt(), rank, end);
    return absl::OkStatus();
  }
  absl::Status StopJob(const std::string&, int attempt, std::chrono::milliseconds grace,
                       const std::string&) override {
    std::vector<std::pair<int, int>> to_stop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stops_.push_back({attempt, grace});
      for (auto& [key, running] : running_) {
        if (running && (attempt < 0 || key.first <= attempt)) to_stop.push_back(key);
      }
    }
    for (auto [rank_attempt, rank] : to_stop) {
      RankEnded ended;
      ended.set_state(RANK_KILLED);
      ended.set_signal(SIGTERM);
      ended.set_stopped_by_agent(true);
      ended.set_stop_reason(STOP_REQUESTED);
      ended.set_stop_detail("StopJob from the controller under test");
      EndRank(rank_attempt, rank, ended);
    }
    return absl::OkStatus();
  }
  absl::Status KeepAlive(const std::string&) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++keepalive_calls_;
    return reachable_ ? absl::OkStatus() : absl::UnavailableError(host_ + " unreachable");
  }
  // Answered before it returns (the interface allows it).
  void KeepAliveAsync(const std::string& job_id, std::function<void(absl::Status)> done) override {
    done(KeepAlive(job_id));
  }
  // Diagnose answers every running rank of the attempt with `stacks_text`
  // and the last Heartbeat() the test sent for it.
  std::string stacks_text = "fake stacks";
  absl::StatusOr<DiagnoseReply> Diagnose(const std::string&, int attempt) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++diagnose_calls_;
    DiagnoseReply reply;
    for (const auto& [key, running] : running_) {
      if (!running || key.first != attempt) continue;
      RankDiagnosis* rank = reply.add_ranks();
      rank->set_global_rank(key.second);
      rank->set_pid(1000 + key.second);
      rank->set_stacks(stacks_text);
      auto beat = beats_.find(key);
      rank->set_heartbeat_age_ms(beat == beats_.end() ? -1 : 10);
      if (beat != beats_.end()) *rank->mutable_last_heartbeat() = beat->second;
    }
    return reply;
  }
  int diagnose_calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return diagnose_calls_;
  }
  // Delivers a heartbeat (or, with missed_heartbeat_ms set, a missed one).
  void Heartbeat(int attempt, int rank, const RankProgress& progress) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      beats_[{attempt, rank}] = progress;
    }
    RankEvent event;
    event.set_attempt(attempt);
    event.set_global_rank(rank);
    *event.mutable_progress() = progress;
    Deliver(event);
  }
  absl::Status StartWatch(const WatchRequest& request, EventHandler on_event, LostHandler on_lost) override {
    if (!watch_error.ok()) return watch_error;
    std::lock_guard<std::mutex> lock(mu_);
    if (!reachable_) return absl::UnavailableError(host_ + " unreachable");
    ++watch_starts_;
    watch_requests_.push_back(request);
    on_event_ = std::move(on_event);
    on_lost_ = std::move(on_lost);
    return absl::OkStatus();
  }
  void StopWatch() override {
    std::lock_guard<std::mutex> lock(mu_);
    on_event_ = nullptr;
    on_lost_ = nullptr;
  }

  // Test controls.
  // Note [Controller failover]: ranks of `attempt` that an earlier
  // controller started run here already (EndRank and StopJob end them).
  void RunAlready(int attempt, const std::vector<int>& ranks) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int rank : ranks) running_[{attempt, rank}] = true;
  }
  void EndRank(int attempt, int rank, RankEnded ended) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = running_.find({attempt, rank});
      if (it == running_.end() || !it->second) return;
      it->second = false;
    }
    if (ended.ended_unix_us() == 0) ended.set_ended_unix_us(absl::ToUnixMicros(absl::Now()));
    RankEvent event;
    event.set_attempt(attempt);
    event.set_global_rank(rank);
    *event.mutable_ended() = ended;
    Deliver(event);
  }
  void Output(int attempt, int rank, bool is_stderr, const std::string& line) {
    RankEvent event;
    event.set_attempt(attempt);
    event.set_global_rank(rank);
    event.mutable_output()->set_is_stderr(is_stderr);
    event.mutable_output()->set_line(line);
    Deliver(event);
  }
  // The host becomes unreachable (its stream breaks; calls fail) until Return().
  void Lose(absl::Status why) {
    LostHandler lost;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reachable_ = false;
      lost = on_lost_;
      on_event_ = nullptr;
      on_lost_ = nullptr;
      // Its ranks are gone with it (the agent's lease stops them).
      for (auto& [key, running] : running_) running = false;
    }
    if (lost) lost(why);
  }
  void Return() {
    std::lock_guard<std::mutex> lock(mu_);
    reachable_ = true;
  }
  int watch_starts() {
    std::lock_guard<std::mutex> lock(mu_);
    return watch_starts_;
  }
  std::vector<WatchRequest> watch_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return watch_requests_;
  }

  // The StartRanks requests, each rank's env completed with the request's
  // common_env (StartRanksEnvironment), as the ranks would see it.
  std::vector<StartRanksRequest> starts() {
    std::lock_guard<std::mutex> lock(mu_);
    return starts_;
  }
  // The StartRanks requests exactly as the controller sent them.
  std::vector<StartRanksRequest> sent() {
    std::lock_guard<std::mutex> lock(mu_);
    return sent_;
  }
  std::vector<std::pair<int, std::chrono::milliseconds>> stops() {
    std::lock_guard<std::mutex> lock(mu_);
    return stops_;
  }
  int reserve_calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return reserve_calls_;
  }

 private:
  bool reachable_ = true;  // guarded by mu_
  int keepalive_calls_ = 0;  // guarded by mu_
  int watch_starts_ = 0;     // guarded by mu_
  std::vector<WatchRequest> watch_requests_;  // guarded by mu_
  std::map<std::pair<int, int>, RankProgress> beats_;  // guarded by mu_
  int diagnose_calls_ = 0;                              // guarded by mu_
  void Deliver(const RankEvent& event) {
    EventHandler handler;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handler = on_event_;
    }
    if (handler) handler(event);
  }

  const std::string host_;
  std::mutex mu_;
  EventHandler on_event_;
  LostHandler on_lost_;
  std::map<std::pair<int, int>, bool> running_;  // (attempt, rank) -> running
  std::vector<StartRanksRequest> starts_;  // guarded by mu_
  std::vector<StartRanksRequest> sent_;    // guarded by mu_
  std::vector<std::pair<int, std::chrono::milliseconds>> stops_;
  int reserve_calls_ = 0;
};

}  // namespace dslaunch

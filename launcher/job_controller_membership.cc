// JobController, Note [Membership]: which hosts an attempt runs on. Lost
// hosts are watched for their return, taken back at restarts, and hosts that
// keep failing are kept out for a while.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "launcher/job_controller.h"

namespace dslaunch {

absl::Status JobController::WatchAgent(int index) {
  WatchRequest request;
  request.set_job_id(spec_.job_id);
  // Note [Controller failover]: a controller taking over asks what it missed.
  if (spec_.resume && attaching_) {
    request.set_replay(true);
    request.set_replay_from_attempt(spec_.resume->attempt);
  }
  return agents_[index]->StartWatch(
      request,
      [this, index](RankEvent event) { events_.Push(ControllerEvent::Rank(index, std::move(event))); },
      [this, index](absl::Status status) { events_.Push(ControllerEvent::AgentLost(index, std::move(status))); });
}

void JobController::MarkLost(int index) {
  lost_agents_.insert(index);
  back_reported_[index] = false;
  lost_flags_[index] = true;
}

bool JobController::Blacklisted(int index) const {
  auto it = blacklisted_until_.find(index);
  return it != blacklisted_until_.end() && std::chrono::steady_clock::now() < it->second;
}

void JobController::BlameHost(const AttemptReport& report) {
  if (report.blamed_agent < 0 || spec_.blacklist_after <= 0 || spec_.min_nodes <= 0) return;
  const int index = report.blamed_agent;
  if (++host_failures_[index] < spec_.blacklist_after) return;
  host_failures_[index] = 0;
  blacklisted_until_[index] = std::chrono::steady_clock::now() + spec_.blacklist_cooldown;
  notice_(absl::StrCat("blacklisting ", agents_[index]->host(), " for ", spec_.blacklist_cooldown.count(),
                       " ms: ", spec_.blacklist_after, " failed attempt(s) blamed on it"));
  log_->Append(JobEvent("blacklist")
                   .Int("attempt", report.attempt)
                   .Text("host", agents_[index]->host())
                   .Int("failures", spec_.blacklist_after)
                   .Int("cooldown_ms", spec_.blacklist_cooldown.count()));
}

bool JobController::ReplanMembership(int next_attempt) {
  // Note [Membership]: a lost host whose agent answers again comes back,
  // with a new event stream. A job that is not elastic needs that too: its
  // stream may have broken while its agent lived on (a frozen dslaunch, Note
  // [Honest exits]), and the next attempt's ranks there must be watched.
  std::vector<std::string> back;
  for (int index : std::set<int>(lost_agents_)) {
    if (Blacklisted(index)) continue;
    if (!agents_[index]->KeepAlive(spec_.job_id).ok() || !WatchAgent(index).ok()) continue;
    lost_agents_.erase(index);
    lost_flags_[index] = false;
    back.push_back(agents_[index]->host());
  }
  if (spec_.min_nodes <= 0) return true;  // not elastic: every planned host, always
  std::vector<int> remaining;
  std::vector<std::string> out;
  for (size_t i = 0; i < agents_.size(); ++i) {
    const int index = static_cast<int>(i);
    if (lost_agents_.count(index) || Blacklisted(index)) {
      out.push_back(absl::StrCat(agents_[index]->host(), Blacklisted(index) ? " (blacklisted)" : " (lost)"));
    } else {
      remaining.push_back(index);
    }
  }
  if (static_cast<int>(remaining.size()) < spec_.min_nodes) {
    notice_(absl::StrCat("not restarting: without ", absl::StrJoin(out, ", "), " ", remaining.size(),
                         " host(s) remain, fewer than the minimum of ", spec_.min_nodes));
    log_->Append(JobEvent("elastic").Int("attempt", next_attempt).Bool("restart", false)
                     .Int("remaining_hosts", static_cast<int64_t>(remaining.size()))
                     .Int("min_nodes", spec_.min_nodes));
    return false;
  }
  if (remaining == active_) return true;
  const int old_world = plan_.world_size();
  std::vector<HostSlots> nodes;
  for (int index : remaining) nodes.push_back(spec_.plan.nodes[index]);
  active_ = remaining;
  plan_ = BuildLaunchPlan(nodes);
  std::string what;
  if (!back.empty()) absl::StrAppend(&what, "taking back ", absl::StrJoin(back, ", "));
  if (!out.empty()) absl::StrAppend(&what, what.empty() ? "" : "; ", "continuing without ", absl::StrJoin(out, ", "));
  notice_(absl::StrCat("elastic: ", what, " on ", remaining.size(), " host(s); world size ", old_world, " -> ",
                       plan_.world_size()));
  log_->Append(JobEvent("elastic").Int("attempt", next_attempt).Bool("restart", true)
                   .Int("remaining_hosts", static_cast<int64_t>(remaining.size()))
                   .Text("back", absl::StrJoin(back, ","))
                   .Int("old_world_size", old_world).Int("world_size", plan_.world_size()));
  return true;
}

}  // namespace dslaunch

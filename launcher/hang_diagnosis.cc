#include "launcher/hang_diagnosis.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dslaunch {
namespace {

struct Position {
  int64_t seq = 0;       // newest collective started in the group (0: none)
  std::string op;
  std::string group;
  bool finished = true;  // not inside it
};

Position Of(const CollectiveRecord& record) {
  Position position;
  position.seq = record.seq();
  position.op = record.op();
  position.group = record.group();
  position.finished = record.completed();
  return position;
}

// The rank's newest collective in each group it called in.
std::map<std::string, Position> NewestPerGroup(const RankProgress& progress) {
  std::map<std::string, Position> newest;
  for (const CollectiveRecord& record : progress.recent_collectives()) newest[record.group()] = Of(record);
  return newest;
}

// The rank's newest collective in any group.
Position NewestOverall(const RankProgress& progress) {
  if (progress.recent_collectives().empty()) return Position{};
  return Of(*progress.recent_collectives().rbegin());
}

std::string Ranks(const std::vector<int>& ranks, const std::function<std::string(int)>& host_of) {
  std::vector<std::string> named;
  for (int rank : ranks) named.push_back(absl::StrCat(rank, " (", host_of(rank), ")"));
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(named, ", "));
}

// `name_group`: several groups were seen, so a number says which group's.
std::string Where(const Position& p, bool name_group) {
  if (p.seq == 0) return "no collective yet";
  return absl::StrCat("#", p.seq, " (", p.op, p.finished ? ", finished" : "", ")",
                      name_group ? absl::StrCat(" in ", p.group.empty() ? "an unnamed group" : p.group) : "");
}

// One group's ranks behind its newest collective, or "" when none is.
// A rank that never called in a group is not counted as its member. A rank
// with no collective at all is counted only when `count_silent` (one group:
// it must be that group's member); with several groups its membership is
// unknown and DescribeHang names it once instead of in every group's line.
struct Lag {
  std::string line;
  bool names_a_rank_outside_communication = false;
};

Lag LagInGroup(const std::string& group, const std::map<int, RankProgress>& beats,
               const std::map<int, std::map<std::string, Position>>& per_group,
               const std::function<std::string(int)>& host_of, bool name_group, bool count_silent) {
  std::map<int, Position> positions;
  int64_t newest = 0;
  for (const auto& [rank, groups] : per_group) {
    auto it = groups.find(group);
    if (it != groups.end()) {
      positions[rank] = it->second;
    } else if (groups.empty() && count_silent) {
      positions[rank] = Position{};
    } else {
      continue;
    }
    newest = std::max(newest, positions[rank].seq);
  }
  std::vector<int> behind, ahead;
  for (const auto& [rank, position] : positions) (position.seq < newest ? behind : ahead).push_back(rank);
  if (behind.empty()) return {};
  const Position& front = positions[ahead.front()];
  Lag lag;
  lag.line = absl::StrCat(name_group ? absl::StrCat("in ", group.empty() ? "an unnamed group" : group, ", ") : "",
                          Ranks(behind, host_of), behind.size() == 1 ? " is" : " are", " behind: newest collective ");
  std::vector<std::string> wheres;
  for (int rank : behind) {
    wheres.push_back(Where(positions[rank], false));
    if (NewestOverall(beats.at(rank)).finished) lag.names_a_rank_outside_communication = true;
  }
  absl::StrAppend(&lag.line, absl::StrJoin(wheres, ", "), " while ", Ranks(ahead, host_of),
                  front.finished ? " finished " : " wait in ", Where(front, false));
  return lag;
}

}  // namespace

std::string DescribeHang(const std::map<int, RankProgress>& last_heartbeats,
                         const std::function<std::string(int rank)>& host_of) {
  if (last_heartbeats.empty()) return "";
  // Note [Per-group collective numbers]: numbers compare only within a group.
  std::map<int, std::map<std::string, Position>> per_group;
  std::set<std::string> groups;
  for (const auto& [rank, progress] : last_heartbeats) {
    per_group[rank] = NewestPerGroup(progress);
    for (const auto& [group, position] : per_group[rank]) groups.insert(group);
  }
  const bool name_group = groups.size() > 1;
  if (groups.empty()) groups.insert("");
  // A rank behind in a group while it waits in another group's collective
  // is a victim; one behind and outside every collective is the cause: its
  // groups come first.
  std::vector<std::string> causes, victims;
  // With several groups, ranks that made no collective at all are named
  // once, as causes: outside every collective, behind in whatever groups
  // they belong to.
  std::vector<int> silent;
  for (const auto& [rank, rank_groups] : per_group) {
    if (rank_groups.empty()) silent.push_back(rank);
  }
  if (name_group && !silent.empty()) {
    causes.push_back(absl::StrCat(Ranks(silent, host_of), silent.size() == 1 ? " has" : " have",
                                  " called no collective yet while the other ranks have"));
  }
  for (const std::string& group : groups) {
    Lag lag = LagInGroup(group, last_heartbeats, per_group, host_of, name_group, /*count_silent=*/!name_group);
    if (lag.line.empty()) continue;
    (lag.names_a_rank_outside_communication ? causes : victims).push_back(lag.line);
  }
  if (!causes.empty() || !victims.empty()) {
    causes.insert(causes.end(), victims.begin(), victims.end());
    return absl::StrJoin(causes, "; ");
  }
  // In every group, every member reached the same collective.
  std::map<int, Position> positions;
  for (const auto& [rank, progress] : last_heartbeats) positions[rank] = NewestOverall(progress);
  std::vector<int> waiting, outside;
  for (const auto& [rank, position] : positions) (position.finished ? outside : waiting).push_back(rank);
  if (outside.empty()) {
    std::set<std::string> wheres;
    for (const auto& [rank, position] : positions) wheres.insert(Where(position, name_group));
    return absl::StrCat("every rank waits in collective ", absl::StrJoin(wheres, ", "),
                        ": no rank is behind; the collective itself is stuck (network or backend)");
  }
  if (!waiting.empty()) {
    std::set<std::string> left;  // the collective the others still wait in
    for (int rank : waiting) left.insert(Where(positions[rank], name_group));
    return absl::StrCat(Ranks(outside, host_of), " left collective ", absl::StrJoin(left, ", "), " while ",
                        Ranks(waiting, host_of), " still wait in it");
  }
  // No rank is communicating: compare steps.
  int64_t top_step = -1;
  for (const auto& [rank, progress] : last_heartbeats) top_step = std::max(top_step, progress.step());
  std::vector<int> slow;
  for (const auto& [rank, progress] : last_heartbeats) {
    if (progress.step() < top_step) slow.push_back(rank);
  }
  if (!slow.empty()) {
    return absl::StrCat("no rank is inside a collective; ", Ranks(slow, host_of), " behind at step ",
                        last_heartbeats.at(slow.front()).step(), " (others at ", top_step, ")");
  }
  return absl::StrCat("no rank is inside a collective and all are at step ", top_step,
                      ": every rank is stuck outside communication");
}

std::string FormatDiagnosis(const RankDiagnosis& diagnosis, const std::string& host) {
  std::string text = absl::StrCat("rank ", diagnosis.global_rank(), " on ", host, ", pid ", diagnosis.pid(), "\n");
  if (diagnosis.heartbeat_age_ms() < 0) {
    absl::StrAppend(&text, "no heartbeat received from this rank\n");
  } else {
    const RankProgress& beat = diagnosis.last_heartbeat();
    absl::StrAppend(&text, "last heartbeat ", diagnosis.heartbeat_age_ms(), " ms ago: step ", beat.step(), "\n");
    absl::StrAppend(&text, "recent collectives (oldest first):\n");
    for (const CollectiveRecord& call : beat.recent_collectives()) {
      absl::StrAppend(&text, "  #", call.seq(), " ", call.op(), call.group().empty() ? "" : " in " + call.group(),
                      " ", call.bytes(), " B, started ",
                      call.started_unix_us(), " us, ",
                      call.completed() ? absl::StrCat("took ", call.duration_us(), " us") : "NOT FINISHED",
                      "\n");
    }
  }
  absl::StrAppend(&text, "\nnative stacks of every thread:\n", diagnosis.stacks(), "\n");
  return text;
}

}  // namespace dslaunch

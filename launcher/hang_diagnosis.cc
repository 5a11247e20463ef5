#include "launcher/hang_diagnosis.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dslaunch {
namespace {

struct Position {
  int64_t seq = 0;       // newest collective started (0: none)
  std::string op;
  bool finished = true;  // not inside it
};

Position Newest(const RankProgress& progress) {
  Position position;
  if (progress.recent_collectives().empty()) return position;
  const CollectiveRecord& last = *progress.recent_collectives().rbegin();
  position.seq = last.seq();
  position.op = last.op();
  position.finished = last.completed();
  return position;
}

std::string Ranks(const std::vector<int>& ranks, const std::function<std::string(int)>& host_of) {
  std::vector<std::string> named;
  for (int rank : ranks) named.push_back(absl::StrCat(rank, " (", host_of(rank), ")"));
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(named, ", "));
}

std::string Where(const Position& p) {
  if (p.seq == 0) return "no collective yet";
  return absl::StrCat("#", p.seq, " (", p.op, p.finished ? ", finished" : "", ")");
}

}  // namespace

std::string DescribeHang(const std::map<int, RankProgress>& last_heartbeats,
                         const std::function<std::string(int rank)>& host_of) {
  if (last_heartbeats.empty()) return "";
  std::map<int, Position> positions;
  int64_t newest = 0;
  for (const auto& [rank, progress] : last_heartbeats) {
    positions[rank] = Newest(progress);
    newest = std::max(newest, positions[rank].seq);
  }
  std::vector<int> behind, ahead;
  for (const auto& [rank, position] : positions) (position.seq < newest ? behind : ahead).push_back(rank);
  const Position& front = positions[ahead.front()];
  if (!behind.empty()) {
    std::string line = absl::StrCat(Ranks(behind, host_of), behind.size() == 1 ? " is" : " are",
                                     " behind: newest collective ");
    std::vector<std::string> wheres;
    for (int rank : behind) wheres.push_back(Where(positions[rank]));
    absl::StrAppend(&line, absl::StrJoin(wheres, ", "), " while ", Ranks(ahead, host_of),
                    front.finished ? " finished " : " wait in ", Where(front));
    return line;
  }
  // Everyone reached the same collective.
  std::vector<int> waiting, outside;
  for (const auto& [rank, position] : positions) (position.finished ? outside : waiting).push_back(rank);
  if (outside.empty()) {
    return absl::StrCat("every rank waits in collective ", Where(front),
                        ": no rank is behind; the collective itself is stuck (network or backend)");
  }
  if (!waiting.empty()) {
    return absl::StrCat(Ranks(outside, host_of), " left collective ", Where(front), " while ",
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
      absl::StrAppend(&text, "  #", call.seq(), " ", call.op(), " ", call.bytes(), " B, started ",
                      call.started_unix_us(), " us, ",
                      call.completed() ? absl::StrCat("took ", call.duration_us(), " us") : "NOT FINISHED",
                      "\n");
    }
  }
  absl::StrAppend(&text, "\nnative stacks of every thread:\n", diagnosis.stacks(), "\n");
  return text;
}

}  // namespace dslaunch

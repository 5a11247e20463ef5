// JobController, Note [Rank heartbeats]: the hang report. Every agent of the
// attempt dumps its ranks' stacks; the controller writes them to the log
// folder and names the lagging rank(s) from the ranks' flight records.
#include <filesystem>
#include <fstream>
#include <future>

#include "absl/strings/str_cat.h"
#include "launcher/hang_diagnosis.h"
#include "launcher/job_controller.h"

namespace dslaunch {

std::string JobController::DiagnoseHang(int attempt, const std::map<int, RankProgress>& last_heartbeats) {
  const LaunchPlan& plan = plan_;
  auto host_of = [&](int rank) { return plan.nodes[plan.ranks[rank].node_index].host; };
  // Every host at once: each agent dumps its ranks' stacks.
  std::vector<std::future<absl::StatusOr<DiagnoseReply>>> replies;
  for (size_t node = 0; node < plan.nodes.size(); ++node) {
    AgentClient* agent = agents_[active_[node]];
    replies.push_back(std::async(std::launch::async, [agent, this, attempt] {
      return agent->Diagnose(spec_.job_id, attempt);
    }));
  }
  std::string folder;
  if (!spec_.diagnosis_dir.empty()) {
    folder = absl::StrCat(spec_.diagnosis_dir, "/attempt_", attempt, "/diagnosis");
    std::error_code error;
    std::filesystem::create_directories(folder, error);
    if (error) folder.clear();
  }
  int written = 0;
  for (size_t node = 0; node < replies.size(); ++node) {
    absl::StatusOr<DiagnoseReply> reply = replies[node].get();
    if (!reply.ok()) {
      notice_(absl::StrCat("no diagnosis from ", plan.nodes[node].host, ": ", reply.status().message()));
      continue;
    }
    for (const RankDiagnosis& rank : reply->ranks()) {
      if (folder.empty()) continue;
      std::ofstream file(absl::StrCat(folder, "/rank_", rank.global_rank(), ".txt"));
      file << FormatDiagnosis(rank, host_of(rank.global_rank()));
      if (file) ++written;
    }
  }
  std::string part;
  const std::string lagging = DescribeHang(last_heartbeats, host_of);
  if (!lagging.empty()) absl::StrAppend(&part, "; ", lagging);
  if (written > 0) absl::StrAppend(&part, "; stacks and recent collectives of ", written, " rank(s) in ", folder);
  log_->Append(JobEvent("hang_diagnosis")
                   .Int("attempt", attempt)
                   .Text("lagging", lagging)
                   .Text("folder", folder)
                   .Int("ranks_dumped", written));
  return part;
}

}  // namespace dslaunch

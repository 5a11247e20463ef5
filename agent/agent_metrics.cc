#include "agent/agent_metrics.h"

#include "absl/strings/str_cat.h"
#include "common/rank_metric_families.h"

namespace dslaunch {

std::vector<prometheus::MetricFamily> AgentMetricFamilies(const std::vector<AgentJobReport>& jobs) {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> families;
  AddMetricSample(AddMetricFamily(families, "dsagent_jobs", MetricType::Gauge,
                                  "Jobs this agent knows (running, or ended and not yet forgotten)"),
                  {}, static_cast<double>(jobs.size()));
  if (!jobs.empty()) {
    prometheus::MetricFamily& silence =
        AddMetricFamily(families, "dsagent_job_controller_silence_seconds", MetricType::Gauge,
                        "Seconds since the job's controller last called this agent");
    for (const AgentJobReport& job : jobs) {
      AddMetricSample(silence, {{"job_id", job.job_id}}, job.seconds_since_controller_contact);
    }
    prometheus::MetricFamily& lease =
        AddMetricFamily(families, "dsagent_job_lease_seconds", MetricType::Gauge,
                        "The job's lease: controller silence after which its ranks are stopped");
    for (const AgentJobReport& job : jobs) AddMetricSample(lease, {{"job_id", job.job_id}}, job.lease_seconds);
  }
  std::vector<LabeledRank> ranks;
  for (const AgentJobReport& job : jobs) {
    for (const AgentJobReport::Rank& rank : job.ranks) {
      MetricLabels labels = {{"job_id", job.job_id},
                             {"attempt", absl::StrCat(rank.attempt)},
                             {"rank", absl::StrCat(rank.status.global_rank())},
                             {"host", rank.status.host()}};
      ranks.push_back({std::move(labels), rank.status});
    }
  }
  AppendRankMetricFamilies("dsagent_rank", ranks, families);
  return families;
}

}  // namespace dslaunch

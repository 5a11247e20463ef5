#include "launcher/prometheus_metrics.h"

#include "absl/strings/str_cat.h"
#include "common/rank_metric_families.h"

namespace dslaunch {

std::vector<prometheus::MetricFamily> JobMetricFamilies(const JobStatusReply& status) {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> families;
  const MetricLabels job = {{"job_id", status.job_id()}};
  {
    prometheus::MetricFamily& family =
        AddMetricFamily(families, "dslaunch_job_state", MetricType::Gauge,
                        "1 for the state the job is in (launcher/job_controller.h)");
    for (int state = JOB_PLANNING; state <= JOB_CANCELLED; ++state) {
      MetricLabels labels = job;
      // "JOB_RUNNING" → "RUNNING"
      labels.push_back({"state", JobState_Name(static_cast<JobState>(state)).substr(4)});
      AddMetricSample(family, labels, status.state() == state ? 1 : 0);
    }
  }
  auto job_metric = [&](const char* name, MetricType type, const char* help, double value) {
    AddMetricSample(AddMetricFamily(families, name, type, help), job, value);
  };
  job_metric("dslaunch_job_attempt", MetricType::Gauge, "The attempt running or about to run, from 0",
             status.attempt());
  job_metric("dslaunch_job_restarts_total", MetricType::Counter, "Restarts that used the --max_restarts budget",
             status.restarts_used());
  job_metric("dslaunch_job_max_restarts", MetricType::Gauge, "--max_restarts", status.max_restarts());
  job_metric("dslaunch_job_world_size", MetricType::Gauge, "Ranks in this attempt", status.world_size());
  job_metric("dslaunch_job_ranks_alive", MetricType::Gauge, "Ranks started or starting and not ended",
             status.ranks_alive());
  job_metric("dslaunch_job_uptime_seconds", MetricType::Gauge, "Seconds since the controller started the job",
             (status.now_unix_ms() - status.job_started_unix_ms()) / 1000.0);
  if (status.step() >= 0) {
    job_metric("dslaunch_job_step", MetricType::Gauge, "The last step every live rank finished", status.step());
  }
  if (status.total_steps() > 0) {
    job_metric("dslaunch_job_total_steps", MetricType::Gauge, "The run's last step", status.total_steps());
  }
  if (status.steps_per_second() > 0) {
    job_metric("dslaunch_job_steps_per_second", MetricType::Gauge, "Steps per second over this attempt",
               status.steps_per_second());
  }
  if (status.eta_seconds() >= 0) {
    job_metric("dslaunch_job_eta_seconds", MetricType::Gauge, "Seconds left at this attempt's rate",
               status.eta_seconds());
  }
  // The job's figures as rank 0 reports them (every rank measures the same job).
  for (const RankStatus& rank : status.ranks()) {
    if (rank.global_rank() != 0 || !rank.has_metrics()) continue;
    if (rank.metrics().tokens_per_second() > 0) {
      job_metric("dslaunch_job_tokens_per_second", MetricType::Gauge, "Tokens per second of the last step (rank 0)",
                 rank.metrics().tokens_per_second());
    }
    job_metric("dslaunch_job_loss", MetricType::Gauge, "Training loss of the last step (rank 0)",
               rank.metrics().loss());
  }
  if (status.last_checkpoint_unix_ms() > 0) {
    job_metric("dslaunch_job_seconds_since_checkpoint", MetricType::Gauge,
               "Seconds since the newest committed checkpoint",
               (status.now_unix_ms() - status.last_checkpoint_unix_ms()) / 1000.0);
  }

  std::vector<LabeledRank> ranks;
  for (const RankStatus& rank : status.ranks()) {
    MetricLabels labels = job;
    labels.push_back({"rank", absl::StrCat(rank.global_rank())});
    labels.push_back({"host", rank.host()});
    ranks.push_back({std::move(labels), rank});
  }
  AppendRankMetricFamilies("dslaunch_rank", ranks, families);
  return families;
}

}  // namespace dslaunch

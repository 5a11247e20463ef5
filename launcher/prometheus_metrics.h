// The controller's job status as Prometheus metric families, served at
// /metrics with --metrics_addr (Note [Live job status],
// launcher/job_status_board.h; the endpoint is common/prometheus_endpoint.h,
// prometheus-cpp's).
//
// Job metrics carry the label job_id; rank metrics add rank and host
// (common/rank_metric_families.h, prefix dslaunch_rank):
//   dslaunch_job_state{job_id,state}       1 for the state the job is in, 0 for the others
//   dslaunch_job_attempt, dslaunch_job_restarts_total, dslaunch_job_max_restarts,
//   dslaunch_job_world_size, dslaunch_job_ranks_alive, dslaunch_job_uptime_seconds,
//   dslaunch_job_step, dslaunch_job_total_steps, dslaunch_job_steps_per_second,
//   dslaunch_job_eta_seconds, dslaunch_job_tokens_per_second, dslaunch_job_loss,
//   dslaunch_job_seconds_since_checkpoint
// A figure nobody reported yet (no heartbeat, no checkpoint, no ETA) is left
// out rather than shown as 0.
#pragma once

#include <vector>

#include "prometheus/metric_family.h"
#include "proto/controller.pb.h"

namespace dslaunch {

std::vector<prometheus::MetricFamily> JobMetricFamilies(const JobStatusReply& status);

}  // namespace dslaunch

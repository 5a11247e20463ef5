// The controller's job status in Prometheus' text exposition format (0.0.4),
// served at /metrics with --metrics_addr (Note [Live job status],
// launcher/job_status_board.h; the HTTP side is common/metrics_http_server.h).
//
// Why written here: prometheus-cpp is not in Debian bookworm, and the text
// format is small and fixed (HELP and TYPE lines, then `name{labels} value`
// samples, label values escaped). The test parses the output with Debian's
// python3-prometheus-client, an independent reader.
//
// Job metrics carry the label job_id; rank metrics add rank and host:
//   dslaunch_job_state{job_id,state}       1 for the state the job is in, 0 for the others
//   dslaunch_job_attempt, dslaunch_job_restarts_total, dslaunch_job_max_restarts,
//   dslaunch_job_world_size, dslaunch_job_ranks_alive, dslaunch_job_uptime_seconds,
//   dslaunch_job_step, dslaunch_job_total_steps, dslaunch_job_steps_per_second,
//   dslaunch_job_eta_seconds, dslaunch_job_tokens_per_second, dslaunch_job_loss,
//   dslaunch_job_seconds_since_checkpoint
//   dslaunch_rank_alive, dslaunch_rank_step, dslaunch_rank_heartbeat_age_seconds,
//   dslaunch_rank_tokens_per_second, dslaunch_rank_loss, dslaunch_rank_gpu_memory_bytes
// A figure nobody reported yet (no heartbeat, no checkpoint, no ETA) is left
// out rather than shown as 0.
#pragma once

#include <string>

#include "proto/controller.pb.h"

namespace dslaunch {

std::string PrometheusText(const JobStatusReply& status);

}  // namespace dslaunch

// An agent's view as Prometheus metric families, served at /metrics with
// `dsagent --metrics_addr` (common/prometheus_endpoint.h). The controller's
// endpoint covers the whole job; an agent's covers the ranks on its host,
// and stays up between jobs, which suits a node exporter beside it (a
// DaemonSet, a systemd unit).
//
//   dsagent_jobs                                     jobs the agent knows (running or recently ended)
//   dsagent_job_controller_silence_seconds{job_id}   since the controller's last call (the lease runs out at
//   dsagent_job_lease_seconds{job_id}                 this many seconds; its ranks are then stopped)
//   dsagent_rank_*{job_id,attempt,rank,host}         as common/rank_metric_families.h
#pragma once

#include <string>
#include <vector>

#include "agent/agent_service.h"
#include "prometheus/metric_family.h"

namespace dslaunch {

std::vector<prometheus::MetricFamily> AgentMetricFamilies(const std::vector<AgentJobReport>& jobs);

}  // namespace dslaunch

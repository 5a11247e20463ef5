// Prometheus metric families, built with prometheus-cpp's data model
// (prometheus::MetricFamily) from what the control plane knows; served by
// common/prometheus_endpoint.h.
//
// The per-rank families are the same on the controller (every rank of the
// job, prefix "dslaunch_rank") and on an agent (the ranks on its host, prefix
// "dsagent_rank"), so they are built here once from RankStatus
// (proto/controller.proto):
//   <prefix>_alive                   1 while starting or running
//   <prefix>_step                    the last step its heartbeats reported
//   <prefix>_heartbeat_age_seconds   since its last heartbeat
//   <prefix>_tokens_per_second, <prefix>_loss, <prefix>_gpu_memory_bytes
// A figure nobody reported yet (no heartbeat, no loss) is left out rather
// than shown as 0, and a family without samples is left out.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "prometheus/metric_family.h"
#include "proto/controller.pb.h"

namespace dslaunch {

using MetricLabels = std::vector<prometheus::ClientMetric::Label>;

// Appends a family (no samples yet) to `families` and returns it.
prometheus::MetricFamily& AddMetricFamily(std::vector<prometheus::MetricFamily>& families, std::string name,
                                          prometheus::MetricType type, std::string help);
// A sample of a gauge or counter family.
void AddMetricSample(prometheus::MetricFamily& family, MetricLabels labels, double value);

// A rank and the labels that name it (job_id, rank, host, ...).
struct LabeledRank {
  MetricLabels labels;
  RankStatus rank;
};

void AppendRankMetricFamilies(const std::string& prefix, const std::vector<LabeledRank>& ranks,
                              std::vector<prometheus::MetricFamily>& families);

}  // namespace dslaunch

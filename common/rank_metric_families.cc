#include "common/rank_metric_families.h"

#include <functional>
#include <optional>

namespace dslaunch {

prometheus::MetricFamily& AddMetricFamily(std::vector<prometheus::MetricFamily>& families, std::string name,
                                          prometheus::MetricType type, std::string help) {
  prometheus::MetricFamily& family = families.emplace_back();
  family.name = std::move(name);
  family.type = type;
  family.help = std::move(help);
  return family;
}

void AddMetricSample(prometheus::MetricFamily& family, MetricLabels labels, double value) {
  prometheus::ClientMetric& metric = family.metric.emplace_back();
  metric.label = std::move(labels);
  if (family.type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
}

void AppendRankMetricFamilies(const std::string& prefix, const std::vector<LabeledRank>& ranks,
                              std::vector<prometheus::MetricFamily>& families) {
  struct RankFamily {
    const char* suffix;
    const char* help;
    std::function<std::optional<double>(const RankStatus&)> value;
  };
  const std::vector<RankFamily> specs = {
      {"_alive", "1 while the rank is starting or running",
       [](const RankStatus& r) -> std::optional<double> {
         return r.state() == RANK_SPAWNING || r.state() == RANK_RUNNING ? 1 : 0;
       }},
      {"_step", "The last step the rank's heartbeats reported",
       [](const RankStatus& r) -> std::optional<double> {
         return r.step() >= 0 ? std::optional<double>(r.step()) : std::nullopt;
       }},
      {"_heartbeat_age_seconds", "Seconds since the rank's last heartbeat",
       [](const RankStatus& r) -> std::optional<double> {
         return r.heartbeat_age_ms() >= 0 ? std::optional<double>(r.heartbeat_age_ms() / 1000.0) : std::nullopt;
       }},
      {"_tokens_per_second", "Tokens per second of the job's last step, as the rank measured it",
       [](const RankStatus& r) -> std::optional<double> {
         return r.metrics().tokens_per_second() > 0 ? std::optional<double>(r.metrics().tokens_per_second())
                                                    : std::nullopt;
       }},
      {"_loss", "The rank's last reported training loss",
       [](const RankStatus& r) -> std::optional<double> {
         return r.has_metrics() ? std::optional<double>(r.metrics().loss()) : std::nullopt;
       }},
      {"_gpu_memory_bytes", "The rank's peak GPU memory allocated",
       [](const RankStatus& r) -> std::optional<double> {
         return r.metrics().gpu_memory_bytes() > 0 ? std::optional<double>(r.metrics().gpu_memory_bytes())
                                                   : std::nullopt;
       }},
  };
  for (const RankFamily& spec : specs) {
    prometheus::MetricFamily family;
    family.name = prefix + spec.suffix;
    family.type = prometheus::MetricType::Gauge;
    family.help = spec.help;
    for (const LabeledRank& labeled : ranks) {
      if (auto value = spec.value(labeled.rank)) AddMetricSample(family, labeled.labels, *value);
    }
    if (!family.metric.empty()) families.push_back(std::move(family));
  }
}

}  // namespace dslaunch

#include "runtime/serve/serving_metrics.h"

#include <limits>
#include <sstream>

#include "common/rank_metric_families.h"
#include "prometheus/text_serializer.h"

namespace dslaunch::runtime {

void LatencyHistogram::Observe(double seconds) {
  size_t bucket = 0;
  while (bucket < bounds_.size() && seconds > bounds_[bucket]) ++bucket;
  if (bucket < bounds_.size()) ++counts_[bucket];
  ++count_;
  sum_ += seconds;
}

prometheus::ClientMetric::Histogram LatencyHistogram::Snapshot() const {
  prometheus::ClientMetric::Histogram histogram;
  histogram.sample_count = count_;
  histogram.sample_sum = sum_;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    histogram.bucket.push_back({cumulative, bounds_[i]});
  }
  histogram.bucket.push_back({count_, std::numeric_limits<double>::infinity()});
  return histogram;
}

ServingMetrics::ServingMetrics()
    : first_token_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      inter_token_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      duration_({0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}) {}

void ServingMetrics::RequestEnded(FinishReason reason, bool failed, double seconds) {
  absl::MutexLock lock(&mu_);
  ++ended_[failed ? "error" : FinishReasonName(reason)];
  duration_.Observe(seconds);
}

void ServingMetrics::Rejected(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  ++rejected_[reason];
}

void ServingMetrics::PromptTokens(int64_t n) {
  absl::MutexLock lock(&mu_);
  prompt_tokens_ += static_cast<uint64_t>(n);
}

void ServingMetrics::FirstToken(double seconds) {
  absl::MutexLock lock(&mu_);
  ++generation_tokens_;
  first_token_.Observe(seconds);
}

void ServingMetrics::NextToken(double seconds) {
  absl::MutexLock lock(&mu_);
  ++generation_tokens_;
  inter_token_.Observe(seconds);
}

void ServingMetrics::EngineState(const GenerationStats& stats) {
  absl::MutexLock lock(&mu_);
  engine_ = stats;
}

std::vector<prometheus::MetricFamily> ServingMetrics::Families() const {
  absl::MutexLock lock(&mu_);
  std::vector<prometheus::MetricFamily> families;
  auto& ended = AddMetricFamily(families, "dsserve_requests_total", prometheus::MetricType::Counter,
                                "Requests that ended, by finish reason (stop, length, cancelled, error)");
  for (const char* reason : {"stop", "length", "cancelled", "error"}) {
    auto it = ended_.find(reason);
    AddMetricSample(ended, {{"finish_reason", reason}}, it == ended_.end() ? 0 : static_cast<double>(it->second));
  }
  auto& rejected = AddMetricFamily(families, "dsserve_rejected_requests_total", prometheus::MetricType::Counter,
                                   "Requests answered with an error before generating, by reason");
  for (const char* reason : {"bad_request", "unauthorized", "queue_full", "unavailable", "not_found"}) {
    auto it = rejected_.find(reason);
    AddMetricSample(rejected, {{"reason", reason}}, it == rejected_.end() ? 0 : static_cast<double>(it->second));
  }
  AddMetricSample(AddMetricFamily(families, "dsserve_prompt_tokens_total", prometheus::MetricType::Counter,
                                  "Prompt tokens of accepted requests"),
                  {}, static_cast<double>(prompt_tokens_));
  AddMetricSample(AddMetricFamily(families, "dsserve_generation_tokens_total", prometheus::MetricType::Counter,
                                  "Tokens generated"),
                  {}, static_cast<double>(generation_tokens_));
  auto histogram = [&](const char* name, const char* help, const LatencyHistogram& h) {
    auto& family = AddMetricFamily(families, name, prometheus::MetricType::Histogram, help);
    prometheus::ClientMetric metric;
    metric.histogram = h.Snapshot();
    family.metric.push_back(std::move(metric));
  };
  histogram("dsserve_time_to_first_token_seconds", "From a request's submission to its first token", first_token_);
  histogram("dsserve_inter_token_latency_seconds", "Between consecutive tokens of a request", inter_token_);
  histogram("dsserve_request_duration_seconds", "From a request's submission to its end", duration_);
  auto gauge = [&](const char* name, const char* help, double value) {
    AddMetricSample(AddMetricFamily(families, name, prometheus::MetricType::Gauge, help), {}, value);
  };
  gauge("dsserve_queue_depth", "Requests waiting for a place in the batch", static_cast<double>(engine_.waiting));
  gauge("dsserve_running_requests", "Requests in the batch", static_cast<double>(engine_.running));
  gauge("dsserve_kv_cache_blocks", "Blocks of the paged key/value cache", static_cast<double>(engine_.cache_blocks));
  gauge("dsserve_kv_cache_free_blocks", "Free blocks of the paged key/value cache",
        static_cast<double>(engine_.cache_free_blocks));
  gauge("dsserve_kv_cache_bytes", "Bytes of the paged key/value cache", static_cast<double>(engine_.cache_bytes));
  AddMetricSample(AddMetricFamily(families, "dsserve_engine_steps_total", prometheus::MetricType::Counter,
                                  "Forwards the engine ran"),
                  {}, static_cast<double>(engine_.steps));
  AddMetricSample(AddMetricFamily(families, "dsserve_preemptions_total", prometheus::MetricType::Counter,
                                  "Requests sent back to wait for key/value blocks, to be computed again"),
                  {}, static_cast<double>(engine_.preemptions));
  return families;
}

std::string ServingMetrics::Text() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, Families());
  return out.str();
}

}  // namespace dslaunch::runtime

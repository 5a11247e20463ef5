// What dsserve's /metrics reports (Prometheus text, prometheus-cpp's data
// model and serializer):
//   dsserve_requests_total{finish_reason}   ended requests: stop, length, cancelled, error
//   dsserve_rejected_requests_total{reason} answered with an error before
//                                           generating: bad_request, unauthorized, queue_full,
//                                           unavailable, not_found
//   dsserve_prompt_tokens_total, dsserve_generation_tokens_total
//   dsserve_time_to_first_token_seconds     histogram, from submission
//   dsserve_inter_token_latency_seconds     histogram, between a request's tokens
//   dsserve_request_duration_seconds        histogram, submission to end
//   dsserve_queue_depth, dsserve_running_requests, dsserve_engine_steps_total,
//   dsserve_preemptions_total (Note [Growing reservations]),
//   dsserve_kv_cache_blocks, dsserve_kv_cache_free_blocks, dsserve_kv_cache_bytes
//                                           the engine's figures after its last step
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "prometheus/metric_family.h"
#include "runtime/generate/generation_engine.h"

namespace dslaunch::runtime {

class LatencyHistogram {
 public:
  explicit LatencyHistogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size()) {}
  void Observe(double seconds);
  prometheus::ClientMetric::Histogram Snapshot() const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative)
  uint64_t count_ = 0;
  double sum_ = 0;
};

class ServingMetrics {
 public:
  ServingMetrics();

  void RequestEnded(FinishReason reason, bool failed, double seconds);
  void Rejected(const std::string& reason);
  void PromptTokens(int64_t n);
  void FirstToken(double seconds_since_submission);
  void NextToken(double seconds_since_previous);
  void EngineState(const GenerationStats& stats);

  std::vector<prometheus::MetricFamily> Families() const;
  // The families in Prometheus' text format.
  std::string Text() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, uint64_t> ended_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> rejected_ ABSL_GUARDED_BY(mu_);
  uint64_t prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  LatencyHistogram first_token_ ABSL_GUARDED_BY(mu_);
  LatencyHistogram inter_token_ ABSL_GUARDED_BY(mu_);
  LatencyHistogram duration_ ABSL_GUARDED_BY(mu_);
  GenerationStats engine_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dslaunch::runtime

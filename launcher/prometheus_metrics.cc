#include "launcher/prometheus_metrics.h"

#include <cmath>
#include <functional>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dslaunch {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Backslash, double quote and line feed are escaped in label values.
std::string EscapeLabel(const std::string& value) {
  std::string escaped;
  for (char c : value) {
    if (c == '\\') escaped += "\\\\";
    else if (c == '"') escaped += "\\\"";
    else if (c == '\n') escaped += "\\n";
    else escaped += c;
  }
  return escaped;
}

// One metric family: HELP and TYPE once, then its samples.
class Family {
 public:
  Family(std::string* out, std::string name, const char* type, const char* help) : out_(out), name_(std::move(name)) {
    absl::StrAppend(out_, "# HELP ", name_, " ", help, "\n# TYPE ", name_, " ", type, "\n");
  }
  void Sample(const Labels& labels, double value) {
    std::string text = name_;
    if (!labels.empty()) {
      text += "{";
      for (size_t i = 0; i < labels.size(); ++i) {
        absl::StrAppend(&text, i ? "," : "", labels[i].first, "=\"", EscapeLabel(labels[i].second), "\"");
      }
      text += "}";
    }
    if (std::isnan(value)) {
      absl::StrAppend(out_, text, " NaN\n");  // a diverged loss, say
    } else if (std::isinf(value)) {
      absl::StrAppend(out_, text, value > 0 ? " +Inf\n" : " -Inf\n");
    } else {
      absl::StrAppendFormat(out_, "%s %.17g\n", text, value);
    }
  }

 private:
  std::string* out_;
  std::string name_;
};

}  // namespace

std::string PrometheusText(const JobStatusReply& status) {
  std::string out;
  const Labels job = {{"job_id", status.job_id()}};
  {
    Family family(&out, "dslaunch_job_state", "gauge", "1 for the state the job is in (launcher/job_controller.h)");
    for (int state = JOB_PLANNING; state <= JOB_CANCELLED; ++state) {
      Labels labels = job;
      labels.emplace_back("state", JobState_Name(static_cast<JobState>(state)).substr(4));  // "JOB_RUNNING" → "RUNNING"
      family.Sample(labels, status.state() == state ? 1 : 0);
    }
  }
  auto job_gauge = [&](const char* name, const char* type, const char* help, double value) {
    Family(&out, name, type, help).Sample(job, value);
  };
  job_gauge("dslaunch_job_attempt", "gauge", "The attempt running or about to run, from 0", status.attempt());
  job_gauge("dslaunch_job_restarts_total", "counter", "Restarts that used the --max_restarts budget",
            status.restarts_used());
  job_gauge("dslaunch_job_max_restarts", "gauge", "--max_restarts", status.max_restarts());
  job_gauge("dslaunch_job_world_size", "gauge", "Ranks in this attempt", status.world_size());
  job_gauge("dslaunch_job_ranks_alive", "gauge", "Ranks started or starting and not ended", status.ranks_alive());
  job_gauge("dslaunch_job_uptime_seconds", "gauge", "Seconds since the controller started the job",
            (status.now_unix_ms() - status.job_started_unix_ms()) / 1000.0);
  if (status.step() >= 0) {
    job_gauge("dslaunch_job_step", "gauge", "The last step every live rank finished", status.step());
  }
  if (status.total_steps() > 0) job_gauge("dslaunch_job_total_steps", "gauge", "The run's last step", status.total_steps());
  if (status.steps_per_second() > 0) {
    job_gauge("dslaunch_job_steps_per_second", "gauge", "Steps per second over this attempt",
              status.steps_per_second());
  }
  if (status.eta_seconds() >= 0) {
    job_gauge("dslaunch_job_eta_seconds", "gauge", "Seconds left at this attempt's rate", status.eta_seconds());
  }
  // The job's figures as rank 0 reports them (every rank measures the same job).
  for (const RankStatus& rank : status.ranks()) {
    if (rank.global_rank() != 0 || !rank.has_metrics()) continue;
    if (rank.metrics().tokens_per_second() > 0) {
      job_gauge("dslaunch_job_tokens_per_second", "gauge", "Tokens per second of the last step (rank 0)",
                rank.metrics().tokens_per_second());
    }
    job_gauge("dslaunch_job_loss", "gauge", "Training loss of the last step (rank 0)", rank.metrics().loss());
  }
  if (status.last_checkpoint_unix_ms() > 0) {
    job_gauge("dslaunch_job_seconds_since_checkpoint", "gauge", "Seconds since the newest committed checkpoint",
              (status.now_unix_ms() - status.last_checkpoint_unix_ms()) / 1000.0);
  }

  auto rank_labels = [&](const RankStatus& rank) {
    Labels labels = job;
    labels.emplace_back("rank", absl::StrCat(rank.global_rank()));
    labels.emplace_back("host", rank.host());
    return labels;
  };
  // Each family once, with a sample per rank that has the figure.
  struct RankFamily {
    const char* name;
    const char* help;
    std::function<std::optional<double>(const RankStatus&)> value;
  };
  const std::vector<RankFamily> families = {
      {"dslaunch_rank_alive", "1 while the rank is starting or running",
       [](const RankStatus& r) -> std::optional<double> {
         return r.state() == RANK_SPAWNING || r.state() == RANK_RUNNING ? 1 : 0;
       }},
      {"dslaunch_rank_step", "The last step the rank's heartbeats reported",
       [](const RankStatus& r) -> std::optional<double> {
         return r.step() >= 0 ? std::optional<double>(r.step()) : std::nullopt;
       }},
      {"dslaunch_rank_heartbeat_age_seconds", "Seconds since the rank's last heartbeat",
       [](const RankStatus& r) -> std::optional<double> {
         return r.heartbeat_age_ms() >= 0 ? std::optional<double>(r.heartbeat_age_ms() / 1000.0) : std::nullopt;
       }},
      {"dslaunch_rank_tokens_per_second", "Tokens per second of the job's last step, as the rank measured it",
       [](const RankStatus& r) -> std::optional<double> {
         return r.metrics().tokens_per_second() > 0 ? std::optional<double>(r.metrics().tokens_per_second())
                                                    : std::nullopt;
       }},
      {"dslaunch_rank_loss", "The rank's last reported training loss",
       [](const RankStatus& r) -> std::optional<double> {
         return r.has_metrics() ? std::optional<double>(r.metrics().loss()) : std::nullopt;
       }},
      {"dslaunch_rank_gpu_memory_bytes", "The rank's peak GPU memory allocated",
       [](const RankStatus& r) -> std::optional<double> {
         return r.metrics().gpu_memory_bytes() > 0 ? std::optional<double>(r.metrics().gpu_memory_bytes())
                                                   : std::nullopt;
       }},
  };
  for (const RankFamily& spec : families) {
    std::vector<std::pair<Labels, double>> samples;
    for (const RankStatus& rank : status.ranks()) {
      if (auto value = spec.value(rank)) samples.emplace_back(rank_labels(rank), *value);
    }
    if (samples.empty()) continue;
    Family family(&out, spec.name, "gauge", spec.help);
    for (const auto& [labels, value] : samples) family.Sample(labels, value);
  }
  return out;
}

}  // namespace dslaunch

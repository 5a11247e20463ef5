#include "launcher/prometheus_metrics.h"

#include <cmath>
#include <limits>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "prometheus/text_serializer.h"

namespace dslaunch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What a scrape receives.
std::string PrometheusText(const JobStatusReply& status) {
  return prometheus::TextSerializer().Serialize(JobMetricFamilies(status));
}

JobStatusReply Running() {
  JobStatusReply status;
  status.set_job_id("job \"7\"\\x");  // quoted and escaped in labels
  status.set_state(JOB_RUNNING);
  status.set_attempt(1);
  status.set_restarts_used(1);
  status.set_max_restarts(3);
  status.set_world_size(2);
  status.set_ranks_alive(2);
  status.set_job_started_unix_ms(1000);
  status.set_now_unix_ms(61000);
  status.set_step(-1);
  status.set_eta_seconds(-1);
  for (int rank = 0; rank < 2; ++rank) {
    RankStatus* entry = status.add_ranks();
    entry->set_global_rank(rank);
    entry->set_host("node\na");
    entry->set_state(RANK_RUNNING);
    entry->set_step(-1);
    entry->set_heartbeat_age_ms(-1);
  }
  return status;
}

TEST(JobMetricFamilies, FamiliesHaveHelpAndTypeAndLabelsAreEscaped) {
  const std::string text = PrometheusText(Running());
  EXPECT_THAT(text, HasSubstr("# HELP dslaunch_job_state "));
  EXPECT_THAT(text, HasSubstr("# TYPE dslaunch_job_state gauge\n"));
  EXPECT_THAT(text, HasSubstr("dslaunch_job_state{job_id=\"job \\\"7\\\"\\\\x\",state=\"RUNNING\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("dslaunch_job_state{job_id=\"job \\\"7\\\"\\\\x\",state=\"FAILED\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE dslaunch_job_restarts_total counter\n"));
  EXPECT_THAT(text, HasSubstr("dslaunch_job_uptime_seconds{job_id=\"job \\\"7\\\"\\\\x\"} 60\n"));
  EXPECT_THAT(text, HasSubstr("dslaunch_rank_alive{job_id=\"job \\\"7\\\"\\\\x\",rank=\"1\",host=\"node\\na\"} 1\n"));
  // Nothing reported yet: no step, ETA, heartbeat age, loss or checkpoint age.
  EXPECT_THAT(text, Not(HasSubstr("dslaunch_job_step")));
  EXPECT_THAT(text, Not(HasSubstr("dslaunch_job_eta_seconds")));
  EXPECT_THAT(text, Not(HasSubstr("dslaunch_rank_heartbeat_age_seconds")));
  EXPECT_THAT(text, Not(HasSubstr("dslaunch_rank_loss")));
  EXPECT_THAT(text, Not(HasSubstr("dslaunch_job_seconds_since_checkpoint")));
}

TEST(JobMetricFamilies, ReportedFiguresAppearOncePerFamily) {
  JobStatusReply status = Running();
  status.set_step(20);
  status.set_total_steps(100);
  status.set_steps_per_second(2);
  status.set_eta_seconds(40);
  status.set_last_checkpoint("global_step20");
  status.set_last_checkpoint_unix_ms(31000);
  for (RankStatus& rank : *status.mutable_ranks()) {
    rank.set_step(20);
    rank.set_heartbeat_age_ms(250);
    rank.mutable_metrics()->set_loss(rank.global_rank() == 0 ? std::numeric_limits<double>::quiet_NaN() : 2.5);
    rank.mutable_metrics()->set_tokens_per_second(5120);
    rank.mutable_metrics()->set_gpu_memory_bytes(2.0 * (1 << 30));
  }
  const std::string text = PrometheusText(status);
  EXPECT_THAT(text, HasSubstr("dslaunch_job_step{job_id=\"job \\\"7\\\"\\\\x\"} 20\n"));
  EXPECT_THAT(text, HasSubstr("dslaunch_job_eta_seconds{job_id=\"job \\\"7\\\"\\\\x\"} 40\n"));
  EXPECT_THAT(text, HasSubstr("dslaunch_job_seconds_since_checkpoint{job_id=\"job \\\"7\\\"\\\\x\"} 30\n"));
  EXPECT_THAT(text, HasSubstr("dslaunch_job_tokens_per_second{job_id=\"job \\\"7\\\"\\\\x\"} 5120\n"));
  // A diverged loss (prometheus-cpp writes "Nan"; parsers take any case).
  EXPECT_THAT(text, HasSubstr("dslaunch_job_loss{job_id=\"job \\\"7\\\"\\\\x\"} Nan\n"));
  EXPECT_THAT(text, HasSubstr("rank=\"1\",host=\"node\\na\"} 0.25\n"));
  EXPECT_THAT(text, HasSubstr("dslaunch_rank_gpu_memory_bytes{job_id=\"job \\\"7\\\"\\\\x\",rank=\"0\",host=\"node\\na\"} 2147483648\n"));
  // One HELP per family, however many ranks.
  size_t helps = 0;
  for (size_t at = text.find("# HELP dslaunch_rank_step "); at != std::string::npos;
       at = text.find("# HELP dslaunch_rank_step ", at + 1)) {
    ++helps;
  }
  EXPECT_EQ(helps, 1u);
}

}  // namespace
}  // namespace dslaunch

#include "agent/agent_metrics.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "prometheus/text_serializer.h"

namespace dslaunch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(AgentMetricFamilies, AnIdleAgentSaysItKnowsNoJob) {
  const std::string text = prometheus::TextSerializer().Serialize(AgentMetricFamilies({}));
  EXPECT_THAT(text, HasSubstr("# TYPE dsagent_jobs gauge\ndsagent_jobs 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("dsagent_rank_")));
  EXPECT_THAT(text, Not(HasSubstr("dsagent_job_lease_seconds")));
}

TEST(AgentMetricFamilies, EachRankOfEachJobWithItsAttempt) {
  AgentJobReport job;
  job.job_id = "train";
  job.seconds_since_controller_contact = 0.5;
  job.lease_seconds = 10;
  for (int rank = 0; rank < 2; ++rank) {
    AgentJobReport::Rank& entry = job.ranks.emplace_back();
    entry.attempt = 2;
    entry.status.set_global_rank(rank + 4);
    entry.status.set_host("node-b");
    entry.status.set_state(rank == 0 ? RANK_RUNNING : RANK_KILLED);
    entry.status.set_step(rank == 0 ? 12 : -1);
    entry.status.set_heartbeat_age_ms(rank == 0 ? 1500 : -1);
    if (rank == 0) entry.status.mutable_metrics()->set_loss(3.25);
  }
  const std::string text = prometheus::TextSerializer().Serialize(AgentMetricFamilies({job}));
  EXPECT_THAT(text, HasSubstr("dsagent_jobs 1\n"));
  EXPECT_THAT(text, HasSubstr("dsagent_job_controller_silence_seconds{job_id=\"train\"} 0.5\n"));
  EXPECT_THAT(text, HasSubstr("dsagent_job_lease_seconds{job_id=\"train\"} 10\n"));
  EXPECT_THAT(text, HasSubstr("dsagent_rank_alive{job_id=\"train\",attempt=\"2\",rank=\"4\",host=\"node-b\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("dsagent_rank_alive{job_id=\"train\",attempt=\"2\",rank=\"5\",host=\"node-b\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("dsagent_rank_step{job_id=\"train\",attempt=\"2\",rank=\"4\",host=\"node-b\"} 12\n"));
  EXPECT_THAT(text, HasSubstr("dsagent_rank_heartbeat_age_seconds{job_id=\"train\",attempt=\"2\",rank=\"4\","
                              "host=\"node-b\"} 1.5\n"));
  EXPECT_THAT(text, HasSubstr("dsagent_rank_loss{job_id=\"train\",attempt=\"2\",rank=\"4\",host=\"node-b\"} 3.25\n"));
  // Rank 5 never reported: no step, age or loss for it.
  EXPECT_THAT(text, Not(HasSubstr("dsagent_rank_step{job_id=\"train\",attempt=\"2\",rank=\"5\"")));
  EXPECT_THAT(text, Not(HasSubstr("dsagent_rank_loss{job_id=\"train\",attempt=\"2\",rank=\"5\"")));
}

}  // namespace
}  // namespace dslaunch

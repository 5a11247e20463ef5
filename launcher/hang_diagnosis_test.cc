#include "launcher/hang_diagnosis.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dslaunch {
namespace {

// A heartbeat whose newest collective is #seq (`finished` or still running).
RankProgress Beat(int64_t step, int64_t seq, bool finished, const std::string& op = "all_reduce") {
  RankProgress progress;
  progress.set_step(step);
  for (int64_t s = std::max<int64_t>(1, seq - 2); s <= seq; ++s) {
    CollectiveRecord* call = progress.add_recent_collectives();
    call->set_seq(s);
    call->set_op(op);
    call->set_completed(s < seq || finished);
  }
  return progress;
}

std::string HostOf(int rank) { return rank < 2 ? "host-a" : "host-b"; }

TEST(DescribeHang, NamesTheRankBehindTheOthersCollective) {
  // Rank 2 never reached collective #42; the others wait in it.
  std::map<int, RankProgress> beats = {
      {0, Beat(9, 42, false)}, {1, Beat(9, 42, false)}, {2, Beat(9, 41, true)}, {3, Beat(9, 42, false)}};
  EXPECT_EQ(DescribeHang(beats, HostOf),
            "rank 2 (host-b) is behind: newest collective #41 (all_reduce, finished) while ranks 0 (host-a), "
            "1 (host-a), 3 (host-b) wait in #42 (all_reduce)");
}

TEST(DescribeHang, EveryRankInTheSameCollectiveBlamesTheCollective) {
  std::map<int, RankProgress> beats = {{0, Beat(3, 7, false)}, {1, Beat(3, 7, false)}};
  EXPECT_EQ(DescribeHang(beats, HostOf),
            "every rank waits in collective #7 (all_reduce): no rank is behind; the collective itself is "
            "stuck (network or backend)");
}

TEST(DescribeHang, OutsideCommunicationComparesSteps) {
  std::map<int, RankProgress> beats = {{0, Beat(12, 30, true)}, {1, Beat(11, 30, true)}};
  EXPECT_EQ(DescribeHang(beats, HostOf),
            "no rank is inside a collective; rank 1 (host-a) behind at step 11 (others at 12)");
  beats[1] = Beat(12, 30, true);
  EXPECT_EQ(DescribeHang(beats, HostOf),
            "no rank is inside a collective and all are at step 12: every rank is stuck outside communication");
}

TEST(DescribeHang, RanksWithoutCollectivesAreBehindThoseWithSome) {
  RankProgress silent;
  silent.set_step(-1);
  std::map<int, RankProgress> beats = {{0, Beat(0, 1, false)}, {1, silent}};
  EXPECT_EQ(DescribeHang(beats, HostOf),
            "rank 1 (host-a) is behind: newest collective no collective yet while rank 0 (host-a) wait in #1 "
            "(all_reduce)");
  EXPECT_EQ(DescribeHang({}, HostOf), "");
}

// A heartbeat from calls made in this order: {group, seq, finished}.
struct Call {
  std::string group;
  int64_t seq;
  bool finished;
};
RankProgress Calls(int64_t step, const std::vector<Call>& calls) {
  RankProgress progress;
  progress.set_step(step);
  for (const Call& c : calls) {
    CollectiveRecord* record = progress.add_recent_collectives();
    record->set_group(c.group);
    record->set_seq(c.seq);
    record->set_op("all_reduce");
    record->set_completed(c.finished);
  }
  return progress;
}

TEST(DescribeHang, ComparesNumbersWithinEachGroupAndNamesTheCauseFirst) {
  // World 4 as tensor 2 x data 2: tensor.0 = {0, 1}, tensor.1 = {2, 3},
  // data.0 = {0, 2}, data.1 = {1, 3}. Each step: a tensor all-reduce, then
  // a data all-reduce. Rank 1 stops computing after step 5; rank 0 waits for
  // it in tensor.0 #6, rank 3 in data.1 #6, and rank 2 in data.0 #6 for rank
  // 0 (a victim, behind in data.0 only because it waits elsewhere). Numbered
  // across groups, ranks 0 and 1 would both look behind.
  std::map<int, RankProgress> beats = {
      {0, Calls(5, {{"tensor.0", 5, true}, {"data.0", 5, true}, {"tensor.0", 6, false}})},
      {1, Calls(5, {{"tensor.0", 5, true}, {"data.1", 5, true}})},
      {2, Calls(5, {{"data.0", 5, true}, {"tensor.1", 6, true}, {"data.0", 6, false}})},
      {3, Calls(5, {{"data.1", 5, true}, {"tensor.1", 6, true}, {"data.1", 6, false}})}};
  EXPECT_EQ(DescribeHang(beats, HostOf),
            "in data.1, rank 1 (host-a) is behind: newest collective #5 (all_reduce, finished) while rank 3 "
            "(host-b) wait in #6 (all_reduce); "
            "in tensor.0, rank 1 (host-a) is behind: newest collective #5 (all_reduce, finished) while rank 0 "
            "(host-a) wait in #6 (all_reduce); "
            "in data.0, rank 0 (host-a) is behind: newest collective #5 (all_reduce, finished) while rank 2 "
            "(host-b) wait in #6 (all_reduce)");
}

TEST(DescribeHang, ARankWithNoCollectiveAmongSeveralGroupsIsNamedOnceAsTheCause) {
  // Tensor 2 x data 2 as above; rank 3 never reached its first collective.
  // Which groups it belongs to is not in the heartbeats: it is named once,
  // first, not in every group's line.
  RankProgress silent;
  silent.set_step(-1);
  std::map<int, RankProgress> beats = {
      {0, Calls(0, {{"tensor.0", 1, true}, {"data.0", 1, true}})},
      {1, Calls(0, {{"tensor.0", 1, true}, {"data.1", 1, false}})},
      {2, Calls(0, {{"tensor.1", 1, false}})},
      {3, silent}};
  EXPECT_EQ(DescribeHang(beats, HostOf),
            "rank 3 (host-b) has called no collective yet while the other ranks have");
}

TEST(DescribeHang, GroupsStuckAtTheSameNumberBlameTheCollectives) {
  // Pipeline stages make different numbers of calls in all: rank 0 sent 9
  // times in pipe.0 where rank 1's data group saw 3 calls. Nobody is behind
  // within a group; every rank waits.
  std::map<int, RankProgress> beats = {
      {0, Calls(2, {{"pipe.0", 8, true}, {"pipe.0", 9, false}})},
      {1, Calls(2, {{"data.1", 3, true}, {"pipe.0", 9, false}})}};
  EXPECT_EQ(DescribeHang(beats, HostOf),
            "every rank waits in collective #9 (all_reduce) in pipe.0: no rank is behind; the collective itself "
            "is stuck (network or backend)");
}

TEST(FormatDiagnosis, ShowsHeartbeatCollectivesAndStacks) {
  RankDiagnosis diagnosis;
  diagnosis.set_global_rank(2);
  diagnosis.set_pid(4242);
  diagnosis.set_heartbeat_age_ms(300);
  *diagnosis.mutable_last_heartbeat() = Beat(9, 41, true);
  diagnosis.set_stacks("TID 4242:\n#0 nanosleep\n");
  const std::string text = FormatDiagnosis(diagnosis, "host-b");
  EXPECT_NE(text.find("rank 2 on host-b, pid 4242"), std::string::npos) << text;
  EXPECT_NE(text.find("last heartbeat 300 ms ago: step 9"), std::string::npos) << text;
  EXPECT_NE(text.find("#41 all_reduce"), std::string::npos) << text;
  EXPECT_NE(text.find("#0 nanosleep"), std::string::npos) << text;
}

}  // namespace
}  // namespace dslaunch

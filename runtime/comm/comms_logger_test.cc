// Note [Comms logger]: which calls are timed, the bandwidth of each, the
// verbose lines and the summary.
#include "runtime/comm/comms_logger.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/collective_op_names.h"
#include "runtime/comm/flight_recorder.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A group of four that moves nothing: the logger's bookkeeping is the thing under test.
class NullCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 4; }
  const std::string& backend() const override { return backend_; }
  absl::Status AllReduce(torch::Tensor&, ReduceOp) override { return absl::OkStatus(); }
  absl::Status ReduceScatter(const torch::Tensor&, torch::Tensor&, ReduceOp) override { return absl::OkStatus(); }
  absl::Status AllGather(const torch::Tensor&, torch::Tensor&) override { return absl::OkStatus(); }
  absl::Status Broadcast(torch::Tensor&, int) override { return absl::OkStatus(); }
  absl::Status Send(const torch::Tensor&, int) override { return absl::OkStatus(); }
  absl::Status Recv(torch::Tensor&, int) override { return absl::OkStatus(); }
  absl::Status SendRecv(std::vector<PeerTransfer>&) override { return absl::OkStatus(); }
  absl::Status AllToAll(const torch::Tensor&, torch::Tensor&) override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }

 private:
  std::string backend_ = "null";
};

TEST(CommsLogger, BandwidthIsDeepSpeedsAfterNcclTests) {
  // 1 GB in one second over a group of 4, in Gbit/s.
  auto [algbw, busbw] = CommsLogger::Bandwidth("all_reduce", 4, 1'000'000'000, 1.0);
  EXPECT_DOUBLE_EQ(algbw, 16.0);  // 2S/t
  EXPECT_DOUBLE_EQ(busbw, 12.0);  // S/t · 2(n-1)/n
  std::tie(algbw, busbw) = CommsLogger::Bandwidth("all_gather", 4, 1'000'000'000, 1.0);
  EXPECT_DOUBLE_EQ(algbw, 8.0);
  EXPECT_DOUBLE_EQ(busbw, 6.0);  // S/t · (n-1)/n
  std::tie(algbw, busbw) = CommsLogger::Bandwidth("broadcast", 4, 1'000'000'000, 0.5);
  EXPECT_DOUBLE_EQ(algbw, 16.0);
  EXPECT_DOUBLE_EQ(busbw, 16.0);
}

TEST(CommsLogger, DeepSpeedsOpNamesMapToThisRuntimes) {
  EXPECT_EQ(CanonicalCollectiveName("all_gather_into_tensor"), "all_gather");
  EXPECT_EQ(CanonicalCollectiveName("reduce_scatter_tensor"), "reduce_scatter");
  EXPECT_EQ(CanonicalCollectiveName("all_to_all_single"), "all_to_all");
  EXPECT_EQ(CanonicalCollectiveName("isend"), "send");
  EXPECT_EQ(CanonicalCollectiveName("all_reduce"), "all_reduce");
  EXPECT_EQ(CanonicalCollectiveName("allreduce"), "");
}

// Through the flight recorder: only the ops asked for are timed, each
// printed with `verbose`, and summed by op and size.
TEST(CommsLogger, TheRecorderTimesTheOpsAskedFor) {
  std::vector<std::string> lines;
  CommsLogger logger(CommsLoggerOptions{/*verbose=*/true, /*prof_all=*/false, {"all_reduce"}},
                     [&](const std::string& line) { lines.push_back(line); });
  FlightRecorder recorder;
  RecordingCommunicator comm(std::make_unique<NullCommunicator>(), &recorder, "data.0");
  torch::Tensor small = torch::zeros({1024});  // 4 KiB
  torch::Tensor large = torch::zeros({1 << 20});  // 4 MiB
  torch::Tensor gathered = torch::zeros({4 << 20});
  ASSERT_TRUE(comm.AllReduce(small, ReduceOp::kSum).ok());  // before the logger: not timed
  recorder.AttachCommsLogger(&logger);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(comm.AllReduce(small, ReduceOp::kSum).ok());
  ASSERT_TRUE(comm.AllReduce(large, ReduceOp::kSum).ok());
  ASSERT_TRUE(comm.AllGather(large, gathered).ok());  // not asked for
  recorder.AttachCommsLogger(nullptr);
  ASSERT_TRUE(comm.AllReduce(small, ReduceOp::kSum).ok());  // detached: not timed

  ASSERT_EQ(lines.size(), 4u);
  EXPECT_THAT(lines[0], HasSubstr("comm op: all_reduce | group: data.0 (4 ranks) | time (ms): "));
  EXPECT_THAT(lines[0], HasSubstr("| msg size: 4.00 KB | algbw (Gbps): "));
  EXPECT_THAT(lines[3], HasSubstr("| msg size: 4.00 MB |"));
  const std::string summary = logger.Summary();
  EXPECT_THAT(summary, HasSubstr("Comm. Op"));
  EXPECT_THAT(summary, HasSubstr("busbw_avg (Gbps)"));
  EXPECT_THAT(summary, HasSubstr("\nall_reduce\n"));
  EXPECT_THAT(summary, ::testing::ContainsRegex("4.00 KB +3 "));
  EXPECT_THAT(summary, ::testing::ContainsRegex("4.00 MB +1 "));
  EXPECT_THAT(summary, Not(HasSubstr("all_gather")));
  // The recorder still numbers every call, timed or not.
  google::protobuf::RepeatedPtrField<CollectiveRecord> records;
  recorder.Snapshot(&records);
  EXPECT_EQ(records.size(), 7);
}

TEST(CommsLogger, NothingTimedNothingSummarized) {
  CommsLogger logger(CommsLoggerOptions{}, nullptr);
  EXPECT_EQ(logger.Summary(), "");
  EXPECT_TRUE(logger.Wants("barrier"));  // prof_all by default, as DeepSpeed
}

}  // namespace
}  // namespace dslaunch::runtime

#include "runtime/pipeline/pipeline_schedule.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace {

using Kind = PipelineScheduleKind;

TEST(PipelineScheduleTest, EveryScheduleIsSoundOverManyShapes) {
  // Every pass once, forward before backward, sends paired one to one with
  // the same tensor in order, no deadlock with rendezvous transfers, and
  // the in-flight bound (CheckSchedules).
  for (int stages = 1; stages <= 8; ++stages) {
    for (int micro = 1; micro <= 24; ++micro) {
      for (Kind kind : {Kind::kGPipe, Kind::kOneForwardOneBackward}) {
        auto check = CheckSchedules(kind, PipelineShape{stages, micro, 1});
        ASSERT_TRUE(check.ok()) << PipelineScheduleName(kind) << " S=" << stages << " M=" << micro << ": "
                                << check.status();
      }
      if (stages < 2 || micro % stages != 0) continue;
      for (int virtual_stages = 2; virtual_stages <= 4; ++virtual_stages) {
        auto check = CheckSchedules(Kind::kInterleaved, PipelineShape{stages, micro, virtual_stages});
        ASSERT_TRUE(check.ok()) << "interleaved S=" << stages << " M=" << micro << " v=" << virtual_stages << ": "
                                << check.status();
      }
    }
  }
}

TEST(PipelineScheduleTest, OneForwardOneBackwardKeepsAtMostStagesMinusStageInFlight) {
  auto check = CheckSchedules(Kind::kOneForwardOneBackward, PipelineShape{4, 16, 1});
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(check->peak_in_flight, (std::vector<int>{4, 3, 2, 1}));
  auto gpipe = CheckSchedules(Kind::kGPipe, PipelineShape{4, 16, 1});
  ASSERT_TRUE(gpipe.ok());
  EXPECT_EQ(gpipe->peak_in_flight, (std::vector<int>{16, 16, 16, 16}));
}

TEST(PipelineScheduleTest, OneForwardOneBackwardOrderOnTheFirstStage) {
  // S = 3, M = 4, stage 0: two warm-up forwards, then F B pairs, then drain.
  auto stream = BuildStageSchedule(Kind::kOneForwardOneBackward, PipelineShape{3, 4, 1}, 0);
  ASSERT_TRUE(stream.ok());
  std::string passes;
  for (const PipeInstruction& in : *stream) {
    if (in.op == PipeOp::kForward) passes += absl::StrCat("F", in.micro_batch, " ");
    if (in.op == PipeOp::kBackward) passes += absl::StrCat("B", in.micro_batch, " ");
  }
  EXPECT_EQ(passes, "F0 F1 F2 B0 F3 B1 B2 B3 ");
}

TEST(PipelineScheduleTest, TheFirstTransferOfEachDirectionCarriesAHeader) {
  auto stream = BuildStageSchedule(Kind::kOneForwardOneBackward, PipelineShape{2, 4, 1}, 1);
  ASSERT_TRUE(stream.ok());
  int headers = 0;
  for (const PipeInstruction& in : *stream) {
    for (const PipeTransfer& t : in.transfers) {
      if (!t.header) continue;
      ++headers;
    }
  }
  EXPECT_EQ(headers, 2);  // activations in, gradients out
}

// Every exchange of a generated stream split in two: its receives first,
// then its sends (what blocking Recv then Send would do).
std::vector<std::vector<PipeInstruction>> SplitExchanges(const PipelineShape& shape) {
  std::vector<std::vector<PipeInstruction>> streams;
  for (int s = 0; s < shape.stages; ++s) {
    auto stream = BuildStageSchedule(Kind::kOneForwardOneBackward, shape, s);
    EXPECT_TRUE(stream.ok());
    streams.emplace_back();
    for (const PipeInstruction& in : *stream) {
      if (in.op != PipeOp::kExchange) {
        streams.back().push_back(in);
        continue;
      }
      for (bool send : {false, true}) {
        PipeInstruction part{PipeOp::kExchange, -1, -1, {}};
        for (const PipeTransfer& t : in.transfers) {
          if (t.send == send) part.transfers.push_back(t);
        }
        if (!part.transfers.empty()) streams.back().push_back(part);
      }
    }
  }
  return streams;
}

TEST(PipelineScheduleTest, BlockingTransfersDeadlockAndTheCheckSaysSo) {
  // The check is not vacuous: with the exchanges split into blocking
  // receives then sends, 1F1B deadlocks; and a stage that receives
  // micro-batches in another order than they were sent is caught.
  const PipelineShape shape{4, 8, 1};
  const std::vector<int> bounds{4, 3, 2, 1};
  auto deadlock = CheckStreams(shape, SplitExchanges(shape), bounds);
  ASSERT_FALSE(deadlock.ok());
  EXPECT_NE(deadlock.status().message().find("deadlock"), std::string::npos) << deadlock.status();

  std::vector<std::vector<PipeInstruction>> swapped;
  for (int s = 0; s < 4; ++s) swapped.push_back(*BuildStageSchedule(Kind::kOneForwardOneBackward, shape, s));
  for (PipeInstruction& in : swapped[1]) {
    for (PipeTransfer& t : in.transfers) {
      if (!t.send && t.tensor == PipeTensor::kActivation && !t.header && t.micro_batch < 2) {
        t.micro_batch = 1 - t.micro_batch;
      }
    }
  }
  auto mismatch = CheckStreams(shape, swapped, bounds);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("different tensor"), std::string::npos) << mismatch.status();
  EXPECT_TRUE(CheckSchedules(Kind::kOneForwardOneBackward, shape).ok());
}

TEST(PipelineScheduleTest, RefusesShapesTheScheduleCannotRun) {
  EXPECT_FALSE(ValidatePipelineShape(Kind::kInterleaved, PipelineShape{4, 6, 2}).ok());
  EXPECT_FALSE(ValidatePipelineShape(Kind::kOneForwardOneBackward, PipelineShape{4, 8, 2}).ok());
  EXPECT_FALSE(ValidatePipelineShape(Kind::kInterleaved, PipelineShape{1, 4, 2}).ok());
  EXPECT_FALSE(ParsePipelineSchedule("zero-bubble").ok());
  EXPECT_EQ(*ParsePipelineSchedule("interleaved"), Kind::kInterleaved);
}

TEST(PipelineScheduleTest, SimulatedBubbleMatchesTheory) {
  // With equal passes the simulated step idles exactly as theory says for
  // GPipe and 1F1B, and interleaving idles less.
  for (int stages : {2, 4, 8}) {
    for (int micro : {stages, 2 * stages, 4 * stages}) {
      for (Kind kind : {Kind::kGPipe, Kind::kOneForwardOneBackward}) {
        auto check = CheckSchedules(kind, PipelineShape{stages, micro, 1});
        ASSERT_TRUE(check.ok());
        const double theory = TheoreticalBubbleFraction(kind, PipelineShape{stages, micro, 1});
        for (double bubble : check->bubble) EXPECT_NEAR(bubble, theory, 1e-9) << stages << " stages, M " << micro;
      }
      auto one = CheckSchedules(Kind::kOneForwardOneBackward, PipelineShape{stages, micro, 1});
      for (int v : {2, 4}) {
        auto interleaved = CheckSchedules(Kind::kInterleaved, PipelineShape{stages, micro, v});
        ASSERT_TRUE(interleaved.ok());
        const double theory = TheoreticalBubbleFraction(Kind::kInterleaved, PipelineShape{stages, micro, v});
        EXPECT_LT(interleaved->makespan, one->makespan) << stages << " stages, M " << micro << ", v " << v;
        for (double bubble : interleaved->bubble) {
          EXPECT_LE(bubble, theory + 1e-9) << stages << " stages, M " << micro << ", v " << v;
        }
      }
    }
  }
}

TEST(PipelineScheduleTest, TheoreticalBubble) {
  EXPECT_DOUBLE_EQ(TheoreticalBubbleFraction(Kind::kOneForwardOneBackward, PipelineShape{4, 8, 1}), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(TheoreticalBubbleFraction(Kind::kInterleaved, PipelineShape{4, 8, 2}), 3.0 / 19.0);
}

}  // namespace
}  // namespace dslaunch::runtime

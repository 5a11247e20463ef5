#include "launcher/controller_event_loop.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using ::testing::ElementsAre;

// Records every call the loop makes; over after `turns` turns.
class RecordingHandler : public ControllerEventHandler {
 public:
  explicit RecordingHandler(int turns) : turns_left_(turns) {}
  bool Over() const override { return turns_left_ == 0; }
  void OnTurn() override {
    --turns_left_;
    calls.push_back("turn");
  }
  std::chrono::steady_clock::time_point WakeAt() override {
    return std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
  }
  void OnWoken() override { calls.push_back("woken"); }
  void OnTick() override { calls.push_back("tick"); }
  void OnRankEvent(int node, const RankEvent& event) override {
    calls.push_back(absl::StrCat("rank node ", node, " rank ", event.global_rank()));
  }
  void OnAgentLost(int node, const absl::Status& why) override {
    calls.push_back(absl::StrCat("lost node ", node, ": ", why.message()));
  }
  void OnHostBack(int node) override { calls.push_back(absl::StrCat("back node ", node)); }
  void OnStopSignal(int signal_number) override { calls.push_back(absl::StrCat("signal ", signal_number)); }

  std::vector<std::string> calls;

 private:
  int turns_left_;
};

TEST(RunEventLoop, HandsEachEventToTheMethodForItsKindInOrder) {
  ControllerEventQueue events;
  RankEvent rank_event;
  rank_event.set_global_rank(3);
  events.Push(ControllerEvent::Rank(1, rank_event));
  events.Push(ControllerEvent::AgentLost(0, absl::UnavailableError("link down")));
  events.Push(ControllerEvent::HostBack(2));
  events.Push(ControllerEvent::Signal(15));
  RecordingHandler handler(/*turns=*/5);
  RunEventLoop(events, handler);
  EXPECT_THAT(handler.calls, ElementsAre("turn", "woken", "rank node 1 rank 3",  //
                                         "turn", "woken", "lost node 0: link down",  //
                                         "turn", "woken", "back node 2",  //
                                         "turn", "woken", "signal 15",  //
                                         "turn", "woken", "tick"));
}

TEST(RunEventLoop, AHandlerOverFromTheStartSeesNothing) {
  ControllerEventQueue events;
  events.Push(ControllerEvent::Signal(2));
  RecordingHandler handler(/*turns=*/0);
  RunEventLoop(events, handler);
  EXPECT_TRUE(handler.calls.empty());
  EXPECT_TRUE(events.PopFor(std::chrono::milliseconds(0)).has_value());  // left for the next phase
}

// The defaults drop what a phase does not handle.
class OnlySignals : public ControllerEventHandler {
 public:
  bool Over() const override { return signal_ != 0; }
  std::chrono::steady_clock::time_point WakeAt() override {
    return std::chrono::steady_clock::now() + std::chrono::seconds(10);
  }
  void OnStopSignal(int signal_number) override { signal_ = signal_number; }
  int signal_ = 0;
};

TEST(RunEventLoop, EventsAPhaseDoesNotHandleAreDropped) {
  ControllerEventQueue events;
  events.Push(ControllerEvent::HostBack(0));
  events.Push(ControllerEvent::Rank(0, RankEvent()));
  events.Push(ControllerEvent::Signal(2));
  events.Push(ControllerEvent::Signal(15));
  OnlySignals handler;
  RunEventLoop(events, handler);
  EXPECT_EQ(handler.signal_, 2);
  std::optional<ControllerEvent> left = events.PopFor(std::chrono::milliseconds(0));
  ASSERT_TRUE(left.has_value());
  EXPECT_EQ(left->signal_number, 15);
}

}  // namespace
}  // namespace dslaunch

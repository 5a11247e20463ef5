// The controller's event loop: what reaches it (rank events from every
// agent's stream, lost agents, returning hosts, stop signals) and the one
// loop that hands each event to the method named for it.
//
// Each phase of a job is a ControllerEventHandler: an attempt
// (JobController::AttemptState, launcher/attempt_state.h) and the backoff
// before a restart (JobController::RestartBackoff). RunEventLoop drives
// whichever is current; a phase reacts only to the events it cares about
// (the defaults drop an event).
//
// One turn of the loop:
//
//   OnTurn() ─▶ wait for an event until WakeAt() ─▶ OnWoken() ─┬─ none by then ─▶ OnTick()
//                                                              └─ an event ─────▶ OnRankEvent | OnAgentLost
//                                                                                 | OnHostBack | OnStopSignal
//   ... until Over().
//
// Thread-safety: events are pushed from any thread (gRPC's threads for the
// agents' streams and keep-alive answers, the signal thread); RunEventLoop
// and every handler method run on the one thread that calls it
// (JobController::Run's).
#pragma once

#include <chrono>

#include "absl/status/status.h"
#include "common/blocking_queue.h"
#include "proto/agent.pb.h"

namespace dslaunch {

struct ControllerEvent {
  enum Kind { kRank, kAgentLost, kSignal, kHostBack } kind = kRank;
  int node = -1;  // the agent's index: kRank, kAgentLost, kHostBack
  RankEvent rank_event;   // kRank
  absl::Status lost;      // kAgentLost: why its event stream broke
  int signal_number = 0;  // kSignal

  static ControllerEvent Rank(int node, RankEvent event);
  static ControllerEvent AgentLost(int node, absl::Status why);
  static ControllerEvent Signal(int signal_number);
  static ControllerEvent HostBack(int node);
};

using ControllerEventQueue = BlockingQueue<ControllerEvent>;

// One phase of the job as the event loop sees it. Not thread-safe: every
// method runs on the event loop's thread.
class ControllerEventHandler {
 public:
  virtual ~ControllerEventHandler() = default;

  // The loop stops once this is true (it is asked before every turn).
  virtual bool Over() const = 0;
  // At the start of every turn, before the wait.
  virtual void OnTurn() {}
  // How long this turn waits for an event.
  virtual std::chrono::steady_clock::time_point WakeAt() = 0;
  // After every wait, before what arrived (if anything) is handled.
  virtual void OnWoken() {}
  // No event arrived by WakeAt().
  virtual void OnTick() {}

  // A rank's output line, progress, start or end, from agent `node`'s stream.
  virtual void OnRankEvent(int node, const RankEvent& event) {}
  // Agent `node`'s event stream broke.
  virtual void OnAgentLost(int node, const absl::Status& why) {}
  // Agent `node`, lost before, answers again (Note [Membership]).
  virtual void OnHostBack(int node) {}
  // dslaunch received a stop signal (SIGINT, SIGTERM, SIGHUP, SIGUSR1).
  virtual void OnStopSignal(int signal_number) {}
};

// Runs turns (see the diagram above) until handler.Over().
void RunEventLoop(ControllerEventQueue& events, ControllerEventHandler& handler);

}  // namespace dslaunch

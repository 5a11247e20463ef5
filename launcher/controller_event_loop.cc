#include "launcher/controller_event_loop.h"

#include <optional>
#include <utility>

namespace dslaunch {

ControllerEvent ControllerEvent::Rank(int node, RankEvent event) {
  ControllerEvent e;
  e.kind = kRank;
  e.node = node;
  e.rank_event = std::move(event);
  return e;
}

ControllerEvent ControllerEvent::AgentLost(int node, absl::Status why) {
  ControllerEvent e;
  e.kind = kAgentLost;
  e.node = node;
  e.lost = std::move(why);
  return e;
}

ControllerEvent ControllerEvent::Signal(int signal_number) {
  ControllerEvent e;
  e.kind = kSignal;
  e.signal_number = signal_number;
  return e;
}

ControllerEvent ControllerEvent::HostBack(int node) {
  ControllerEvent e;
  e.kind = kHostBack;
  e.node = node;
  return e;
}

void RunEventLoop(ControllerEventQueue& events, ControllerEventHandler& handler) {
  while (!handler.Over()) {
    handler.OnTurn();
    std::optional<ControllerEvent> event = events.PopUntil(handler.WakeAt());
    handler.OnWoken();
    if (!event) {
      handler.OnTick();
      continue;
    }
    switch (event->kind) {
      case ControllerEvent::kRank:
        handler.OnRankEvent(event->node, event->rank_event);
        break;
      case ControllerEvent::kAgentLost:
        handler.OnAgentLost(event->node, event->lost);
        break;
      case ControllerEvent::kHostBack:
        handler.OnHostBack(event->node);
        break;
      case ControllerEvent::kSignal:
        handler.OnStopSignal(event->signal_number);
        break;
    }
  }
}

}  // namespace dslaunch

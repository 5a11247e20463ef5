#include "launcher/stop_attribution.h"

#include <string.h>

#include "absl/strings/str_cat.h"

namespace dslaunch {
namespace {

// How the stopped rank itself ended: "killed by SIGTERM", "exited with code 143".
std::string HowItEnded(const RankEnded& ended) {
  if (ended.state() == RANK_KILLED) {
    const char* name = sigabbrev_np(ended.signal());
    return absl::StrCat("killed by SIG", name != nullptr ? name : absl::StrCat(ended.signal()));
  }
  if (ended.state() == RANK_LOST) return absl::StrCat("lost: ", ended.detail());
  return absl::StrCat("exited with code ", ended.exit_code());
}

}  // namespace

std::string DescribeFreeze(const FreezeWatch::Freeze& freeze) {
  return absl::StrCat("dslaunch was frozen for ", freeze.duration().count(), " ms (SIGSTOP?)");
}

StopAttribution AttributeUnexpectedStop(int rank, const std::string& host, const RankEnded& ended,
                                        const std::optional<FreezeWatch::Freeze>& freeze,
                                        const LeaseTiming& timing) {
  StopAttribution why;
  const std::string how = HowItEnded(ended);
  switch (ended.stop_reason()) {
    case STOP_LEASE_EXPIRED: {
      const std::string lost = absl::StrCat("the agent on ", host, " lost the controller for ",
                                            ended.controller_silent_ms(), " ms");
      if (freeze && timing.FreezeOutlastsLease(freeze->duration())) {
        why.end = ATTEMPT_CONTROLLER_FROZEN;
        why.cause = absl::StrCat(DescribeFreeze(*freeze), " and the agents' leases (", timing.lease.count(),
                                 " ms) expired: ", lost, " and stopped rank ", rank, " (", how, ")");
      } else {
        // dslaunch ran (long enough), so its keep-alives were sent: they did not arrive.
        why.blame_host = true;
        const std::string frozen =
            freeze ? absl::StrCat("dslaunch was frozen for only ", freeze->duration().count(), " ms")
                   : std::string("dslaunch was not frozen");
        why.cause = absl::StrCat(lost, " (lease ", timing.lease.count(), " ms) and stopped rank ", rank, " (",
                                 how, "); ", frozen, ": the network to ", host, "?");
      }
      break;
    }
    case STOP_REQUESTED:
      why.cause = absl::StrCat("rank ", rank, " on ", host, " was stopped by a StopJob this dslaunch did not send (",
                               ended.stop_detail(), "; ", how, ")");
      break;
    case STOP_AGENT_SHUTDOWN:
      why.blame_host = true;
      why.cause = absl::StrCat("the agent on ", host, " stopped rank ", rank, " because it was shutting down (",
                               ended.stop_detail(), "; ", how, ")");
      break;
    default:
      why.cause = absl::StrCat("rank ", rank, " on ", host, " was stopped by its agent although this dslaunch did not "
                               "ask (", how, "; the agent gave no reason: older than this dslaunch?)");
  }
  return why;
}

std::optional<StopAttribution> AttributeFailureDuringFreeze(const std::string& how,
                                                            const std::optional<FreezeWatch::Freeze>& freeze,
                                                            const LeaseTiming& timing) {
  if (!freeze || !timing.FreezeOutlastsLease(freeze->duration())) return std::nullopt;
  StopAttribution why;
  why.end = ATTEMPT_CONTROLLER_FROZEN;
  why.cause = absl::StrCat(DescribeFreeze(*freeze), " and the agents' leases (", timing.lease.count(),
                           " ms) expired, stopping the ranks; meanwhile ", how);
  return why;
}

std::optional<StopAttribution> AttributeLostStream(const std::string& host, const absl::Status& error,
                                                   const std::optional<FreezeWatch::Freeze>& freeze,
                                                   const LeaseTiming& timing) {
  if (!freeze) return std::nullopt;
  StopAttribution why;
  why.end = ATTEMPT_CONTROLLER_FROZEN;
  why.cause = absl::StrCat(DescribeFreeze(*freeze), " and lost its event stream from ", host, " meanwhile (",
                           error.message(), ")");
  if (timing.FreezeOutlastsLease(freeze->duration())) {
    absl::StrAppend(&why.cause, "; the agents' leases (", timing.lease.count(), " ms) expired too");
  }
  return why;
}

}  // namespace dslaunch

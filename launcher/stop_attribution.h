// Who ended an attempt that nobody in this controller ended (Note [Honest
// exits], job_controller.h): a rank its agent stopped although this
// controller was not stopping it, and an event stream that broke while
// dslaunch itself was frozen. Pure functions of what the agent reported and
// what the controller's FreezeWatch saw; the controller turns the result
// into a failed attempt.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/control_plane_defaults.h"
#include "launcher/freeze_watch.h"
#include "proto/agent.pb.h"
#include "proto/job.pb.h"

namespace dslaunch {

struct StopAttribution {
  AttemptEnd end = ATTEMPT_RANK_STOPPED;  // or ATTEMPT_CONTROLLER_FROZEN
  std::string cause;                      // one line, names who stopped the rank and why
  bool blame_host = false;                // the host's side (its link, its agent) is at fault
};

// The controller's leases toward its agents.
struct LeaseTiming {
  std::chrono::milliseconds lease{kDefaultLeaseMs};
  std::chrono::milliseconds keepalive_interval{1000};
  // True when a freeze this long alone lets a lease run out: the agent hears
  // nothing for the freeze plus up to two keep-alive periods around it.
  bool FreezeOutlastsLease(std::chrono::milliseconds frozen) const {
    return frozen + 2 * keepalive_interval >= lease;
  }
};

// `rank` on `host` ended with stopped_by_agent while the controller was not
// stopping it. `freeze`: the controller's longest freeze around that time.
StopAttribution AttributeUnexpectedStop(int rank, const std::string& host, const RankEnded& ended,
                                        const std::optional<FreezeWatch::Freeze>& freeze,
                                        const LeaseTiming& timing);

// `rank` on `host` ended badly by itself (`how`: JobController::DescribeEnd's
// words). When the controller was frozen around that time long enough for
// the agents' leases to run out, the agents were stopping every rank: the
// rank most likely failed because a peer of its collectives was stopped
// ("Connection closed by peer"), and whichever end reaches the controller
// first once it runs again, the freeze is the cause (ATTEMPT_CONTROLLER_FROZEN).
// nullopt otherwise: the rank's own failure is the cause.
std::optional<StopAttribution> AttributeFailureDuringFreeze(const std::string& how,
                                                            const std::optional<FreezeWatch::Freeze>& freeze,
                                                            const LeaseTiming& timing);

// The event stream from `host` broke with `error`. When the controller was
// frozen around that time, the freeze is the cause (ATTEMPT_CONTROLLER_FROZEN,
// no host blamed); nullopt: a lost host as the error says.
std::optional<StopAttribution> AttributeLostStream(const std::string& host, const absl::Status& error,
                                                   const std::optional<FreezeWatch::Freeze>& freeze,
                                                   const LeaseTiming& timing);

// "dslaunch was frozen for 2003 ms (SIGSTOP?)": the one wording of a freeze.
std::string DescribeFreeze(const FreezeWatch::Freeze& freeze);

}  // namespace dslaunch

// Bounds of the control plane's durations, shared by dslaunch's options, the
// agent's flags and the agent's RPCs (defined here once). They keep every
// deadline far from overflowing std::chrono::steady_clock (int64
// nanoseconds: about 292 years) and gRPC's int keepalive settings (lease/4
// in ms), and they are generous: a stop grace of an hour lets the largest
// model save a checkpoint on SIGTERM; a lease of a day outlives any pause a
// controller can survive.
#pragma once

#include <cstdint>

namespace dslaunch {

// SIGTERM -> SIGKILL grace when ranks are stopped (--stop_grace_ms, StopJob.grace_ms).
inline constexpr int64_t kMaxStopGraceMs = 3600 * 1000;  // 1 hour

// How long an agent keeps a job's ranks without word from its controller
// (--lease_ms, StartRanks.lease_ms). Shorter leases than the minimum expire
// on an ordinary scheduling hiccup.
inline constexpr int64_t kMinLeaseMs = 500;
inline constexpr int64_t kMaxLeaseMs = 24 * 3600 * 1000;  // 1 day

}  // namespace dslaunch

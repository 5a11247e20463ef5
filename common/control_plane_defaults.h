// Defaults of the control plane's durations, defined once: dslaunch's
// options, dsagent's flags, the agent's configuration, the controller's job
// spec and their --help all read them from here (their bounds are in
// common/control_plane_limits.h).
#pragma once

#include <cstdint>

namespace dslaunch {

// SIGTERM -> SIGKILL grace when ranks are stopped (--stop_grace_ms).
inline constexpr int64_t kDefaultStopGraceMs = 3000;

// How long an agent keeps a job's ranks without word from its controller
// (--lease_ms; StartRanks.lease_ms 0 means this).
inline constexpr int64_t kDefaultLeaseMs = 10000;

// A preemption notice's grace before the ranks are stopped (--preempt_grace_ms).
inline constexpr int64_t kDefaultPreemptGraceMs = 30000;

// A rank silent for this long while its process lives is a hang
// (--heartbeat_timeout_ms; 0: off).
inline constexpr int64_t kDefaultHeartbeatTimeoutMs = 15000;

// The cap of the doubling wait between restarts (--max_restart_backoff_ms).
inline constexpr int64_t kDefaultMaxRestartBackoffMs = 30000;

// How long a host that failed stays out of new attempts (--blacklist_cooldown_ms).
inline constexpr int64_t kDefaultBlacklistCooldownMs = 300000;

// The deadline of one controller -> agent call.
inline constexpr int64_t kDefaultAgentCallTimeoutMs = 10000;

}  // namespace dslaunch

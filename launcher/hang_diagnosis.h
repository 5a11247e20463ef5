// Naming the rank(s) a hung job waits for, from the ranks' last heartbeats
// (Note [Rank heartbeats]): each carries the rank's step and its most recent
// collectives, numbered per process group alike on every member (Note
// [Per-group collective numbers], runtime/comm/flight_recorder.h). Within a
// group, a rank whose newest number is behind the others' never arrived at
// the collective they wait in. Behind while waiting in another group's
// collective, it is a victim; behind and outside every collective, it is the
// cause, and its stack shows where it is.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "proto/agent.pb.h"

namespace dslaunch {

// One line for the root cause, e.g. "rank 1 (host-b) is behind: newest
// collective #41 (all_reduce, finished) while ranks 0 (host-a), 2 (host-b)
// wait in #42 (all_reduce)". With several groups each lagging group gets
// such a part ("in tensor.0, rank 1 ..."), the causes' first, joined by
// "; ". Empty when the heartbeats say nothing (none arrived).
std::string DescribeHang(const std::map<int, RankProgress>& last_heartbeats,
                         const std::function<std::string(int rank)>& host_of);

// The text of one rank's diagnosis file: last heartbeat (step, recent
// collectives) and every thread's native stack.
std::string FormatDiagnosis(const RankDiagnosis& diagnosis, const std::string& host);

}  // namespace dslaunch

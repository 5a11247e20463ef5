// Naming the rank(s) a hung job waits for, from the ranks' last heartbeats
// (Note [Rank heartbeats]): each carries the rank's step and its most recent
// collectives, numbered alike on every rank of the group. A rank whose newest
// collective number is behind the others' never arrived at the collective
// they wait in: that rank is lagging, and its stack shows where it is.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "proto/agent.pb.h"

namespace dslaunch {

// One line for the root cause, e.g. "rank 1 (host-b) is behind: its newest
// collective is #41 (all_reduce, finished) while ranks 0,2,3 wait in #42
// (all_reduce)". Empty when the heartbeats say nothing (none arrived).
std::string DescribeHang(const std::map<int, RankProgress>& last_heartbeats,
                         const std::function<std::string(int rank)>& host_of);

// The text of one rank's diagnosis file: last heartbeat (step, recent
// collectives) and every thread's native stack.
std::string FormatDiagnosis(const RankDiagnosis& diagnosis, const std::string& host);

}  // namespace dslaunch

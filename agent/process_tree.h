// The direct children of a process, read from /proc. Standard library only
// (the rank keeper links it; Note [Rank keeper] in agent/process_spawner.h).
#pragma once

#include <sys/types.h>

#include <vector>

namespace dslaunch {

// Every direct child of `pid`, zombies not yet reaped included, in no
// particular order. Reads /proc/PID/task/*/children where the kernel has them
// (CONFIG_PROC_CHILDREN), otherwise scans every /proc/N/stat for its parent.
// A process that ends while this runs may or may not be listed.
std::vector<pid_t> ChildrenOf(pid_t pid);

// The two ways ChildrenOf reads, for tests. ChildrenFromTaskFiles returns
// false when the kernel has no children files.
bool ChildrenFromTaskFiles(pid_t pid, std::vector<pid_t>* children);
std::vector<pid_t> ChildrenFromProcScan(pid_t pid);

}  // namespace dslaunch

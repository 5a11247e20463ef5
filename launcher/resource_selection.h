// Which hosts and slots (devices) of a hostfile a job runs on: DeepSpeed's
// --num_nodes / --num_gpus / --include / --exclude semantics.
//
// Include/exclude syntax: `host[:slot[,slot...]][@host[:slot...]...]`, e.g.
// `worker-0:0,2@worker-1` (every slot of worker-1). A host without slots means
// all of its slots (DeepSpeed #6671 failed on this form).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/hostfile.h"

namespace dslaunch {

// The slots a job uses on one host, ascending. Slot i is device i.
struct HostSlots {
  std::string host;
  std::vector<int> slots;
};

struct ResourceRequest {
  int num_nodes = -1;   // -1: every host
  int num_gpus = -1;    // -1: every slot of each host
  std::string include;  // empty: none given
  std::string exclude;  // empty: none given
};

// Applies the request to the hostfile, keeping hostfile order. Errors (each
// names the flag and the offending text): include together with exclude;
// include/exclude together with num_nodes or num_gpus; a host not in the
// hostfile; a slot outside 0..slots-1; bad syntax (empty host, non-numeric
// slot, empty segment between '@'); num_nodes or num_gpus < 1 or larger than
// what the hostfile offers (naming the host that has fewer slots); and a
// selection that leaves no slot at all.
absl::StatusOr<std::vector<HostSlots>> SelectResources(const Hostfile& hostfile,
                                                       const ResourceRequest& request);

}  // namespace dslaunch

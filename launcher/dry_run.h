// --dry_run: what a job would start, without starting it. Each node's shared
// environment is printed once, then each rank's placement, argv and own
// variables (Note [Environment once per node] in launcher/launch_plan.h), so
// the output grows linearly with the number of ranks.
#pragma once

#include <cstdio>

#include "launcher/job_controller.h"
#include "launcher/launcher_options.h"

namespace dslaunch {

// Writes the plan of `spec` to `out`. Values known only at launch (the master
// port an agent picks, the store's address and token) are described, not shown.
void PrintDryRun(const JobSpec& spec, LauncherKind launcher, std::FILE* out);

}  // namespace dslaunch

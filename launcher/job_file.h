// A job file (train.cfg / .yaml) as dslaunch's PROGRAM, and --validate: the
// file is checked for the world the other options describe before anything
// starts, and every rank runs dsrank on it. Built into the dslaunch binary
// only: it reads configs through runtime/config (dslaunch_core does not).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "launcher/job_controller.h"
#include "launcher/launcher_options.h"

namespace dslaunch {

// Whether dslaunch's PROGRAM names a job file (by its ending).
bool IsJobFile(const std::string& path);

// When PROGRAM is a job file: checks it for spec->plan's world with every
// override (those after the job file, dsrank's own arguments, count as
// those before it, in the order dsrank applies them: dslaunch's first), and
// makes spec run dsrank on it with the embedded runtime's settings
// (preemption grace, hang timeout). Otherwise refuses --override. An error's
// message is the whole line to print (a usage error).
// `ranks_on_cpu`: every rank will run on a CPU (a local job on a machine
// without GPUs), where fp16 training is refused up front. `local`: every
// rank runs on this machine (a local nvme_path is checked here).
absl::Status UseJobFileIfGiven(const LauncherOptions& options, JobSpec* spec, bool ranks_on_cpu, bool local);

// --validate FILE: a train.cfg (or .yaml) or a bare ds_config (.json), for
// `world_size` ranks. One verdict: valid, with the resolved config on stdout
// and exit code 0; or not valid (a problem, or a key this runtime does not
// support yet), every reason on stderr and exit code 2. Starts nothing.
// `local`: every rank runs on this machine (its nvme_path is checked here).
int ValidateConfigFile(const LauncherOptions& options, int world_size, bool ranks_on_cpu, bool local);

}  // namespace dslaunch

// dsrank's command line, parsed in one place for both of its readers: dsrank
// itself and dslaunch, which checks a job file with every override before it
// starts a rank (an override written after the job file counts exactly as
// one written before it; issue 13).
//
//   dsrank JOB.cfg [--override key.path=value]... [--loss_log PATH] [--quiet_config]
//          [--device auto|cpu|cuda] [--cuda_memory_limit_gb G]
//          [--exit_at_step N] [--hang_at_step N [--hang_rank R]]
//          [--pipeline_timeline FILE] [--raise_at_step N --raise_rank R]
//
// The flags are a common/flag_table.h table (exact names, `--flag VALUE` or
// `--flag=VALUE`, --help and --version). `--local_rank=N` is accepted and
// ignored (LOCAL_RANK is in the environment).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

struct DsrankArguments {
  std::string job_file;
  std::vector<std::string> overrides;  // "key.path=value", in the order given
  std::string loss_log;
  bool quiet_config = false;  // one line instead of the resolved configuration
  bool report = false;        // print the runtime report (dslaunch report) and exit; no job file
  std::string pipeline_timeline;  // Chrome trace of one step's pipeline instructions
  std::string device = "auto";
  int64_t exit_at_step = -1;
  int64_t hang_at_step = -1;
  int64_t hang_rank = -1;
  int64_t raise_at_step = -1;  // tests: rank raise_rank's pipeline stage raises in a forward pass of this step
  int64_t raise_rank = 0;
  // tests: rank raise_rank's stage announces a wrong shape for a micro-batch's activation of this step
  int64_t shape_fault_at_step = -1;
  double cuda_memory_limit_gb = 0;
  // Non-empty for --help or --version: print it and exit 0.
  std::string print;
};

// `args` without the program name. Errors name the argument; the overrides'
// own syntax is checked by ParseOverride (config_loader.h), not here.
absl::StatusOr<DsrankArguments> ParseDsrankArguments(const std::vector<std::string>& args);

}  // namespace dslaunch::runtime

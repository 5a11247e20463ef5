#include "runtime/config/dsrank_arguments.h"

#include "absl/strings/str_cat.h"
#include "common/flag_table.h"

namespace dslaunch::runtime {

absl::StatusOr<DsrankArguments> ParseDsrankArguments(const std::vector<std::string>& args) {
  DsrankArguments parsed;
  int64_t ignored_local_rank = -1;
  FlagTable flags("dsrank", "dsrank JOB.cfg [flags]");
  flags.Positional("JOB.cfg", "the job file (train.cfg)")
      .Repeated("--override", &parsed.overrides, "KEY=VALUE",
                "change a job file key, applied after dslaunch's own --override")
      .String("--loss_log", &parsed.loss_log, "PATH", "write each step's loss to PATH (rank 0)")
      .Bool("--quiet_config", &parsed.quiet_config,
            "print one line about the resolved configuration instead of all of it (dslaunch --validate prints it)")
      .String("--pipeline_timeline", &parsed.pipeline_timeline, "FILE",
              "with pipeline.stages > 1: write step 2's instructions per stage as a Chrome trace (chrome://tracing, "
              "Perfetto) to FILE")
      .String("--device", &parsed.device, "", "where to train", {"auto", "cpu", "cuda"})
      .Double("--cuda_memory_limit_gb", &parsed.cuda_memory_limit_gb, "G",
              "cap this rank's CUDA memory at G GiB (0: no cap)", {0, 65536, /*min_exclusive=*/true})
      .Int("--exit_at_step", &parsed.exit_at_step, "N", "exit with an error at step N (tests; -1: never)")
      .Int("--hang_at_step", &parsed.hang_at_step, "N", "stop making progress at step N (tests; -1: never)")
      .Int("--hang_rank", &parsed.hang_rank, "R", "only rank R hangs (-1: every rank)")
      .Int("--raise_at_step", &parsed.raise_at_step, "N",
           "with pipeline stages: rank --raise_rank raises an error in micro-batch 1's forward pass of step N "
           "(tests; -1: never)")
      .Int("--raise_rank", &parsed.raise_rank, "R", "the rank --raise_at_step or --shape_fault_at_step fails")
      .Int("--shape_fault_at_step", &parsed.shape_fault_at_step, "N",
           "with pipeline stages: rank --raise_rank announces micro-batch 0's activation of step N with a wrong "
           "shape (tests; -1: never)")
      .Int("--local_rank", &ignored_local_rank, "N", "ignored: LOCAL_RANK is in the environment")
      .Bool("--report", &parsed.report,
            "print what this binary was built with and finds (LibTorch, CUDA, NCCL, GPUs, kernels, CPU Adam) and "
            "exit; dslaunch report shows it with the host's facts");
  if (absl::Status status = flags.Parse(args); !status.ok()) return status;
  if (flags.help_requested()) {
    parsed.print = flags.Help();
    return parsed;
  }
  if (flags.version_requested()) {
    parsed.print = flags.Version() + "\n";
    return parsed;
  }
  if (parsed.report) {
    if (!flags.positionals().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--report takes no job file (got ", flags.positionals()[0], ")"));
    }
    return parsed;
  }
  if (flags.positionals().empty()) return absl::InvalidArgumentError("missing the job file (a train.cfg)");
  if (flags.positionals().size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", flags.positionals()[1],
                                                   "' (the job file is ", flags.positionals()[0], ")"));
  }
  parsed.job_file = flags.positionals()[0];
  return parsed;
}

}  // namespace dslaunch::runtime

// dsrank's side of Note [Comms logger] (runtime/comm/comms_logger.h): with
// the ds_config's comms_logger enabled, a logger attached to the rank's
// flight recorder for the training run; rank 0 prints each timed call with
// `verbose`, and its summary table at the end.
#pragma once

#include <cstdio>
#include <memory>

#include "runtime/api/rank_bootstrap.h"
#include "runtime/comm/comms_logger.h"
#include "runtime/config/job_config.h"

namespace dslaunch::runtime {

class JobCommsLogger {
 public:
  // Null when the block is off or the rank has no runtime (no collectives).
  static std::unique_ptr<JobCommsLogger> Attach(const CommsLoggerConfig& config, RankRuntime* rank_runtime,
                                                int rank, std::FILE* out);
  ~JobCommsLogger();  // detaches: no call is timed into a logger that is gone

  // Rank 0: "dsrank: comms logger: ..." and the table (nothing timed: says so).
  void PrintSummary();

 private:
  JobCommsLogger(RankRuntime* rank_runtime, int rank, std::FILE* out, CommsLoggerOptions options);

  RankRuntime* const rank_runtime_;
  const int rank_;
  std::FILE* const out_;
  const bool prof_all_;
  CommsLogger logger_;
};

}  // namespace dslaunch::runtime

#include "runtime/dsrank/job_comms_logger.h"

#include "absl/strings/str_format.h"
#include "common/collective_op_names.h"

namespace dslaunch::runtime {

std::unique_ptr<JobCommsLogger> JobCommsLogger::Attach(const CommsLoggerConfig& config, RankRuntime* rank_runtime,
                                                       int rank, std::FILE* out) {
  if (!config.enabled || rank_runtime == nullptr) return nullptr;
  CommsLoggerOptions options;
  options.verbose = config.verbose;
  options.prof_all = config.prof_all;
  // The config checked every name (CheckResolvedDsConfig).
  for (const std::string& op : config.prof_ops) options.prof_ops.push_back(CanonicalCollectiveName(op));
  std::unique_ptr<JobCommsLogger> logger(new JobCommsLogger(rank_runtime, rank, out, options));
  rank_runtime->flight_recorder().AttachCommsLogger(&logger->logger_);
  return logger;
}

JobCommsLogger::JobCommsLogger(RankRuntime* rank_runtime, int rank, std::FILE* out, CommsLoggerOptions options)
    : rank_runtime_(rank_runtime),
      rank_(rank),
      out_(out),
      prof_all_(options.prof_all),
      logger_(std::move(options), [rank, out](const std::string& line) {
        if (rank == 0) absl::FPrintF(out, "%s\n", line);  // as DeepSpeed's log_dist(..., ranks=[0])
      }) {}

JobCommsLogger::~JobCommsLogger() { rank_runtime_->flight_recorder().AttachCommsLogger(nullptr); }

void JobCommsLogger::PrintSummary() {
  if (rank_ != 0) return;
  const std::string summary = logger_.Summary();
  if (summary.empty()) {
    absl::FPrintF(out_, "dsrank: comms logger: no collective was timed (%s)\n",
                  prof_all_ ? "this run made none" : "comms_logger.prof_ops names none this run made");
    return;
  }
  absl::FPrintF(out_, "dsrank: comms logger: rank 0's collectives since the start, each timed from the device "
                      "idle to the call done:\n%s",
                summary);
  std::fflush(out_);
}

}  // namespace dslaunch::runtime

// Where the lines that ranks write go: the console (prefixed, filtered) and
// per-rank files under --log_dir, one folder per attempt.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace dslaunch {

class RankOutputSink {
 public:
  virtual ~RankOutputSink() = default;
  // Before the first line of `attempt`.
  virtual absl::Status OnAttemptStarted(int attempt) = 0;
  virtual void OnLine(int attempt, int rank, const std::string& host, bool is_stderr,
                      const std::string& line) = 0;
};

// Prints "[host:rank] line" to the controller's stdout or stderr (as the rank
// wrote it), only for `ranks` when not empty. Thread-safe.
class ConsoleOutput final : public RankOutputSink {
 public:
  ConsoleOutput(std::set<int> ranks, bool prefix, FILE* out = stdout, FILE* err = stderr);
  absl::Status OnAttemptStarted(int attempt) override { return absl::OkStatus(); }
  void OnLine(int attempt, int rank, const std::string& host, bool is_stderr,
              const std::string& line) override;

 private:
  const std::set<int> ranks_;
  const bool prefix_;
  FILE* const out_;
  FILE* const err_;
  std::mutex mu_;
};

// Writes DIR/<job_id>/attempt_<n>/rank_<r>.stdout.log and .stderr.log.
// Not thread-safe: the controller's event loop calls it.
class LogDirOutput final : public RankOutputSink {
 public:
  LogDirOutput(std::string dir, std::string job_id);
  ~LogDirOutput() override;
  absl::Status OnAttemptStarted(int attempt) override;
  void OnLine(int attempt, int rank, const std::string& host, bool is_stderr,
              const std::string& line) override;
  // The folder of the current attempt (empty before the first).
  const std::string& attempt_dir() const { return attempt_dir_; }

 private:
  void CloseFiles();

  const std::string dir_;
  const std::string job_id_;
  int attempt_ = -1;
  std::string attempt_dir_;
  std::map<std::pair<int, bool>, FILE*> files_;  // (rank, is_stderr) -> file
};

// Sends every line to several sinks.
class TeeOutput final : public RankOutputSink {
 public:
  void Add(std::unique_ptr<RankOutputSink> sink) { sinks_.push_back(std::move(sink)); }
  absl::Status OnAttemptStarted(int attempt) override;
  void OnLine(int attempt, int rank, const std::string& host, bool is_stderr,
              const std::string& line) override;

 private:
  std::vector<std::unique_ptr<RankOutputSink>> sinks_;
};

}  // namespace dslaunch

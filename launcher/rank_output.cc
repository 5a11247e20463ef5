#include "launcher/rank_output.h"

#include <sys/stat.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dslaunch {

ConsoleOutput::ConsoleOutput(std::set<int> ranks, bool prefix, FILE* out, FILE* err)
    : ranks_(std::move(ranks)), prefix_(prefix), out_(out), err_(err) {}

void ConsoleOutput::OnLine(int, int rank, const std::string& host, bool is_stderr,
                           const std::string& line) {
  if (!ranks_.empty() && !ranks_.count(rank)) return;
  std::string text = prefix_ ? absl::StrCat("[", host, ":", rank, "] ", line, "\n")
                             : absl::StrCat(line, "\n");
  std::lock_guard<std::mutex> lock(mu_);
  FILE* stream = is_stderr ? err_ : out_;
  std::fwrite(text.data(), 1, text.size(), stream);
  std::fflush(stream);
}

LogDirOutput::LogDirOutput(std::string dir, std::string job_id)
    : dir_(std::move(dir)), job_id_(std::move(job_id)) {}

LogDirOutput::~LogDirOutput() { CloseFiles(); }

void LogDirOutput::CloseFiles() {
  for (auto& [key, file] : files_) std::fclose(file);
  files_.clear();
}

absl::Status LogDirOutput::OnAttemptStarted(int attempt) {
  CloseFiles();
  attempt_ = attempt;
  attempt_dir_ = absl::StrCat(dir_, "/", job_id_, "/attempt_", attempt);
  std::error_code error;
  std::filesystem::create_directories(attempt_dir_, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("--log_dir: cannot create ", attempt_dir_, ": ", error.message()));
  }
  return absl::OkStatus();
}

void LogDirOutput::OnLine(int attempt, int rank, const std::string&, bool is_stderr,
                          const std::string& line) {
  if (attempt != attempt_) return;  // a late line of an earlier attempt
  FILE*& file = files_[{rank, is_stderr}];
  if (file == nullptr) {
    std::string path =
        absl::StrCat(attempt_dir_, "/rank_", rank, is_stderr ? ".stderr.log" : ".stdout.log");
    file = std::fopen(path.c_str(), "a");
    if (file == nullptr) return;
  }
  std::fwrite(line.data(), 1, line.size(), file);
  std::fputc('\n', file);
  std::fflush(file);
}

absl::Status TeeOutput::OnAttemptStarted(int attempt) {
  for (auto& sink : sinks_) DS_RETURN_IF_ERROR(sink->OnAttemptStarted(attempt));
  return absl::OkStatus();
}

void TeeOutput::OnLine(int attempt, int rank, const std::string& host, bool is_stderr,
                       const std::string& line) {
  for (auto& sink : sinks_) sink->OnLine(attempt, rank, host, is_stderr, line);
}

}  // namespace dslaunch

// dsprep: text files -> tokenized, memory-mappable dataset for dsrank.
//
//   dsprep --input '/usr/share/games/fortunes/*' --split_on_percent_lines --output data/fortunes
//   dsprep --format alpaca --records alpaca_data.json --tokenizer model --model_dir llama-2-7b \
//          --sequence_length 512 --output data/alpaca
//
// Prints one summary line on success; on failure the error (naming the flag
// or file) and exit status 1, or 2 for a bad command line.
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/data/dsprep_options.h"
#include "runtime/data/prepare_dataset.h"
#include "runtime/fs/file_system.h"

namespace {

constexpr int kFailure = 1;
constexpr int kUsageError = 2;

void PrintError(const std::string& message) {
  std::fprintf(stderr, "dsprep: %s\n", message.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dslaunch::runtime;
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<DsprepCommand> command = ParseDsprepArgs(args);
  if (!command.ok()) {
    PrintError(std::string(command.status().message()));
    std::fputs(DsprepUsage().c_str(), stderr);
    return kUsageError;
  }
  if (command->help) {
    std::fputs(DsprepUsage().c_str(), stdout);
    return 0;
  }
  if (command->version) {
    std::printf("%s\n", DsprepVersion().c_str());
    return 0;
  }
  // --output dir/prefix: the folder is made, as `mkdir -p` would.
  const std::string& prefix =
      command->instruction ? command->instruction_options.output_prefix : command->options.output_prefix;
  if (prefix.find('/') != std::string::npos) {
    const std::string folder = ParentDirectory(prefix);
    FileSystem& fs = FileSystem::Default();
    if (absl::Status made = fs.CreateDirectories(folder); !made.ok()) {
      PrintError("--output " + prefix + ": " + std::string(made.message()));  // it names the folder
      return kFailure;
    }
    if (!fs.IsDirectory(folder)) {
      PrintError("--output " + prefix + ": " + folder + " is not a folder");
      return kFailure;
    }
  }
  if (command->instruction) {
    absl::StatusOr<InstructionPrepareSummary> summary = PrepareInstructionDataset(command->instruction_options);
    if (!summary.ok()) {
      PrintError(std::string(summary.status().message()));
      return kFailure;
    }
    for (const std::string& skipped : summary->skipped_examples) PrintError("skipped " + skipped);
    std::printf("dsprep: %s\n", summary->ToString().c_str());
    return 0;
  }
  absl::StatusOr<PrepareSummary> summary = PrepareDataset(command->options);
  if (!summary.ok()) {
    PrintError(std::string(summary.status().message()));
    return kFailure;
  }
  std::printf("dsprep: %s\n", summary->ToString().c_str());
  return 0;
}

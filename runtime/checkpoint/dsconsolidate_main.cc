// dsconsolidate: one fp32 safetensors file from a dslaunch checkpoint of any
// ZeRO stage, streamed shard by shard; or a check of a checkpoint folder.
//
//   dsconsolidate CHECKPOINT_DIR [--tag TAG] --output model.safetensors [--allow_nonfinite]
//   dsconsolidate --verify CHECKPOINT_DIR [--tag TAG]
#include <cstdio>
#include <string>
#include <vector>

#include "common/flag_table.h"

#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/checkpoint/consolidate.h"
#include "runtime/fs/file_system.h"

namespace {

using namespace dslaunch::runtime;

// One line per checkpoint (or the one tag): verified or why not, and what
// `latest` says. 0 when everything verifies.
int Verify(const std::string& dir, const std::string& tag) {
  FileSystem& fs = FileSystem::Default();
  if (!fs.IsDirectory(dir)) {
    std::fprintf(stderr, "dsconsolidate: %s is not a folder\n", dir.c_str());
    return 1;
  }
  int failures = 0;
  std::vector<std::string> tags;
  if (!tag.empty()) {
    tags.push_back(tag);
  } else {
    tags = CommittedTags(fs, dir);
    // Folders that look like checkpoints but were never committed.
    for (const std::string& name : fs.ListDirectory(dir).value_or(std::vector<std::string>{})) {
      if (!CheckTag(name).ok() || !fs.IsDirectory(TagDir(dir, name))) continue;
      if (!fs.Exists(TagDir(dir, name) + "/COMPLETE")) {
        std::printf("uncommitted %s: no commit record (COMPLETE)\n", TagDir(dir, name).c_str());
      }
    }
    auto latest = ReadLatestTag(fs, dir);
    if (latest.ok()) {
      std::printf("latest      %s\n", latest->c_str());
    } else if (absl::IsNotFound(latest.status()) && tags.empty()) {
      std::printf("latest      none (no checkpoint)\n");
    } else {
      std::printf("BAD latest  %s\n", std::string(latest.status().message()).c_str());
      ++failures;
    }
  }
  for (const std::string& name : tags) {
    auto manifest = VerifyCheckpoint(fs, dir, name);
    if (!manifest.ok()) {
      std::printf("FAILED      %s\n", std::string(manifest.status().message()).c_str());
      ++failures;
    } else if (manifest->legacy) {
      std::printf("unverified  %s: written before commit records had checksums\n", TagDir(dir, name).c_str());
    } else {
      int64_t bytes = 0;
      for (const auto& file : manifest->files) bytes += file.digest.size;
      std::printf("ok          %s: step %ld, %d rank(s), %zu file(s), %ld bytes verified\n", TagDir(dir, name).c_str(),
                  static_cast<long>(manifest->step), manifest->ranks, manifest->files.size(), static_cast<long>(bytes));
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tag, output;
  bool verify = false;
  ConsolidateOptions options;
  dslaunch::FlagTable flags("dsconsolidate",
                            "dsconsolidate CHECKPOINT_DIR [--tag TAG] --output FILE.safetensors "
                            "[--allow_nonfinite]\n       dsconsolidate --verify CHECKPOINT_DIR [--tag TAG]");
  flags.Positional("CHECKPOINT_DIR", "the checkpoint folder (the one with `latest`)")
      .String("--tag", &tag, "TAG", "the checkpoint to read (default: the one `latest` names)")
      .String("--output", &output, "FILE", "the safetensors file to write")
      .Bool("--verify", &verify, "check every checkpoint (or the one tag) against its commit record")
      .Bool("--allow_nonfinite", &options.allow_nonfinite, "write NaN/Inf values instead of refusing");
  if (absl::Status parsed = flags.Parse(std::vector<std::string>(argv + 1, argv + argc)); !parsed.ok()) {
    std::fprintf(stderr, "dsconsolidate: %s\n(dsconsolidate --help lists the flags)\n",
                 std::string(parsed.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (flags.version_requested()) {
    std::printf("%s\n", flags.Version().c_str());
    return 0;
  }
  if (flags.positionals().size() != 1 || (verify == !output.empty())) {
    std::fputs(flags.Help().c_str(), stderr);
    return 2;
  }
  const std::string dir = flags.positionals()[0];
  if (verify) return Verify(dir, tag);
  auto summary = ConsolidateCheckpoint(dir, tag, output, options);
  if (!summary.ok()) {
    std::fprintf(stderr, "dsconsolidate: %s\n", std::string(summary.status().message()).c_str());
    return 1;
  }
  std::printf("dsconsolidate: %s/%s -> %s: %ld tensors, %ld fp32 values, %d rank file(s) read one at a time\n",
              dir.c_str(), summary->tag.c_str(), output.c_str(), static_cast<long>(summary->tensors),
              static_cast<long>(summary->elements), summary->ranks_read);
  return 0;
}

// dsconsolidate: one fp32 safetensors file from a dslaunch checkpoint of any
// ZeRO stage, streamed shard by shard.
//
//   dsconsolidate CHECKPOINT_DIR [--tag TAG] --output model.safetensors
#include <cstdio>
#include <string>

#include "runtime/checkpoint/consolidate.h"

int main(int argc, char** argv) {
  std::string dir, tag, output;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if ((arg == "--tag" || arg == "--output") && i + 1 < argc) {
      (arg == "--tag" ? tag : output) = argv[++i];
    } else if (dir.empty() && arg.rfind("--", 0) != 0) {
      dir = arg;
    } else {
      std::fprintf(stderr, "dsconsolidate: unknown argument '%s'\n", arg.c_str());
      dir.clear();
      break;
    }
  }
  if (dir.empty() || output.empty()) {
    std::fprintf(stderr, "usage: dsconsolidate CHECKPOINT_DIR [--tag TAG] --output FILE.safetensors\n");
    return 2;
  }
  auto summary = dslaunch::runtime::ConsolidateCheckpoint(dir, tag, output);
  if (!summary.ok()) {
    std::fprintf(stderr, "dsconsolidate: %s\n", std::string(summary.status().message()).c_str());
    return 1;
  }
  std::printf("dsconsolidate: %s/%s -> %s: %ld tensors, %ld fp32 values, %d rank file(s) read one at a time\n",
              dir.c_str(), summary->tag.c_str(), output.c_str(), static_cast<long>(summary->tensors),
              static_cast<long>(summary->elements), summary->ranks_read);
  return 0;
}

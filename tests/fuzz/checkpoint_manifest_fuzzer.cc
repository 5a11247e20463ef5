// libFuzzer target: a checkpoint's commit record, COMPLETE (Note [Checkpoint
// commit record], runtime/checkpoint/checkpoint_manifest.h), which resume
// reads from a folder anyone with write access could have damaged. Every
// input is refused with an error naming the record, or parses into a record
// that names a tag and a rank count and lists only plain file names of the
// folder, each once; and a parsed record written back parses to the same
// record.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "runtime/checkpoint/checkpoint_manifest.h"

using dslaunch::runtime::CheckpointManifest;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto parsed = CheckpointManifest::Parse(text, "fuzz/COMPLETE");
  if (!parsed.ok()) {
    if (parsed.status().message().find("fuzz/COMPLETE") == std::string::npos) __builtin_trap();
    return 0;
  }
  if (parsed->tag.empty()) __builtin_trap();
  if (parsed->legacy) return 0;  // a one-line tag: nothing else to check
  if (parsed->ranks < 1) __builtin_trap();
  std::set<std::string> names;
  for (const auto& file : parsed->files) {
    if (file.name.empty() || file.name == "." || file.name == ".." || file.name.find('/') != std::string::npos ||
        file.digest.size < 0 || !names.insert(file.name).second) {
      __builtin_trap();
    }
  }
  auto again = CheckpointManifest::Parse(parsed->Serialize(), "fuzz/COMPLETE");
  if (!again.ok() || again->tag != parsed->tag || again->step != parsed->step || again->ranks != parsed->ranks ||
      again->files.size() != parsed->files.size()) {
    __builtin_trap();
  }
  for (size_t i = 0; i < parsed->files.size(); ++i) {
    if (again->files[i].name != parsed->files[i].name || !(again->files[i].digest == parsed->files[i].digest)) {
      __builtin_trap();
    }
  }
  return 0;
}

// libFuzzer target: the controller's journal (Note [Controller failover],
// launcher/controller_journal.h), which dslaunch --resume_job reads after a
// crash: a file cut short, damaged or written by someone else. Every input
// either reads into a job or is an error naming the file; nothing else.
#include <cstddef>
#include <cstdint>
#include <string>

#include "launcher/controller_journal.h"
#include "tests/fuzz/fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = dslaunch::fuzz::WriteInputFile(data, size, ".journal");
  auto read = dslaunch::ReadControllerJournal(path);
  if (!read.ok()) {
    if (std::string(read.status().message()).find(path) == std::string::npos) __builtin_trap();
    return 0;
  }
  // A journal that reads has its start record: the job's identity.
  if (read->attempt < -1) __builtin_trap();
  return 0;
}

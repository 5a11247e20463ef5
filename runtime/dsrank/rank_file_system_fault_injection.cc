// The file system of dsrank_fault_injection, a test-only build of dsrank
// (never installed): FileSystem::Default() wrapped in a
// FaultInjectingFileSystem that the integration test steers.
//
// Note [Holding a save from a test]
// test_chaos.sh sends SIGTERM to dslaunch while a checkpoint is being
// written and needs the save to be open at that moment, whatever the load on
// the machine. With DSRANK_FAULT_HOLD_COMMIT=FIFO and
// DSRANK_FAULT_HOLD_COMMIT_OF=<checkpoint.dir>/<tag> in its environment, the
// rank that commits checkpoints (rank 0) is held just before it renames the
// partial folder to <checkpoint.dir>/<tag> (every rank's part written and
// recorded, nothing committed); it creates FIFO.held, waits until the test
// writes to FIFO (`echo > FIFO`), and goes on. The test waits for the event (the .held
// file), not for a time. Only this binary reads the variable; dsrank and the
// runtime never do.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "runtime/dsrank/rank_file_system.h"
#include "runtime/fs/fault_injecting_file_system.h"

namespace dslaunch::runtime {
namespace {

constexpr char kHoldCommit[] = "DSRANK_FAULT_HOLD_COMMIT";
constexpr char kHoldCommitOf[] = "DSRANK_FAULT_HOLD_COMMIT_OF";

// Blocks until `fifo` is opened for writing and closed again.
void WaitForRelease(const std::string& fifo) {
  const int fd = ::open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::perror(("dsrank_fault_injection: open " + fifo).c_str());
    return;  // let the save go on rather than hang the test
  }
  char buffer[64];
  while (::read(fd, buffer, sizeof(buffer)) > 0) {
  }
  ::close(fd);
}

FaultInjectingFileSystem* Create() {
  auto* fs = new FaultInjectingFileSystem(FileSystem::Default());
  const char* fifo = std::getenv(kHoldCommit);
  const char* target = std::getenv(kHoldCommitOf);
  if (fifo == nullptr || *fifo == '\0' || target == nullptr || *target == '\0') return fs;
  // The commit's rename: <dir>/.<tag>.partial to <dir>/<tag>.
  std::shared_ptr<FsPause> pause = fs->PauseBefore(FsOp::kRename, target, 1, PathMatch::kWhole);
  std::thread([pause, path = std::string(fifo)] {
    if (!pause->WaitUntilReached(absl::Hours(24))) return;
    const std::string held = path + ".held";
    if (std::FILE* marker = std::fopen(held.c_str(), "w")) std::fclose(marker);
    std::fprintf(stderr, "dsrank_fault_injection: holding the checkpoint commit until %s is written\n", path.c_str());
    WaitForRelease(path);
    pause->Release();
  }).detach();
  return fs;
}

}  // namespace

FileSystem& RankFileSystem() {
  static FaultInjectingFileSystem* fs = Create();  // never destroyed: used until exit
  return *fs;
}

}  // namespace dslaunch::runtime

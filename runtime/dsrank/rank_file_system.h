// The file system dsrank trains through (checkpoints, the prepared dataset).
//
// A link-time seam, so that no production code reads a test's setting: the
// dsrank binary links rank_file_system_posix.cc (FileSystem::Default()); the
// test-only binary dsrank_fault_injection links the same main.cc with
// rank_file_system_fault_injection.cc, whose FaultInjectingFileSystem the
// integration tests steer (Note [Holding a save from a test]).
#pragma once

#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

// Lives as long as the process.
FileSystem& RankFileSystem();

}  // namespace dslaunch::runtime

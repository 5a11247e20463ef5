#include "runtime/dsrank/rank_file_system.h"

namespace dslaunch::runtime {

FileSystem& RankFileSystem() { return FileSystem::Default(); }

}  // namespace dslaunch::runtime

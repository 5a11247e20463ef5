#include "common/gpu_count.h"

#include <dirent.h>

namespace dslaunch {

int DetectLocalGpuCount() {
  DIR* dir = ::opendir("/proc/driver/nvidia/gpus");
  if (dir == nullptr) return 0;
  int count = 0;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count;
}

}  // namespace dslaunch

// Counting this host's NVIDIA GPUs without linking CUDA: the driver lists one
// directory per GPU under /proc/driver/nvidia/gpus.
#pragma once

namespace dslaunch {

// 0 when the driver is not loaded.
int DetectLocalGpuCount();

}  // namespace dslaunch

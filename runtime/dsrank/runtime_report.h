// `dsrank --report` (and the runtime half of `dslaunch report`, DeepSpeed's
// ds_report): what this rank binary was built with and what it finds at run
// time: LibTorch, CUDA, NCCL, the GPUs, the fused kernels, the CPU Adam.
#pragma once

#include <string>

namespace dslaunch::runtime {

// One "name: value" line per fact, in a fixed order.
std::string RuntimeReport();

}  // namespace dslaunch::runtime

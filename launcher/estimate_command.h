// `dslaunch estimate`: the memory a job needs before it runs (Note [Memory
// estimate] in runtime/estimate/memory_estimate.h).
//
//   dslaunch estimate --model configs/gpt-1.3b.cfg --num_gpus 8 --gpu_memory_gib 80
//   dslaunch estimate --params 7e9 --largest_layer_params 2.6e8 --num_gpus 8 --num_nodes 2
#pragma once

#include <string>
#include <vector>

namespace dslaunch {

// `args` without "dslaunch estimate"; prints the report (or the error) and
// returns the exit code.
int RunEstimateCommand(const std::vector<std::string>& args);

}  // namespace dslaunch

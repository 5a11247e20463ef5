// `dslaunch report` (DeepSpeed's ds_report): what a user checks when
// something is off, in one place. The host's half comes from here (versions
// of dslaunch and gRPC, CPU, memory, NUMA, io_uring, the driver's view of the
// GPUs and their topology through nvidia-smi); the runtime's half from
// `dsrank --report` beside this binary (LibTorch, CUDA, NCCL, GPUs as CUDA
// sees them, fused kernels, the CPU Adam's ISA and threads).
//
//   dslaunch report
#pragma once

#include <string>
#include <vector>

namespace dslaunch {

// `args` without "dslaunch report"; prints the report and returns the exit
// code (1 when dsrank could not report).
int RunReportCommand(const std::vector<std::string>& args);

// The host facts this machine gives, one "name: value" line each (no
// subprocess).
std::string HostReport();

}  // namespace dslaunch

// One scalar for the monitors: a metric's value at a step. The names are
// DeepSpeed's where it logs the same quantity (Note [Monitor metrics] in
// training_monitors.h).
#pragma once

#include <cstdint>
#include <string>

namespace dslaunch::runtime {

struct MonitorEvent {
  std::string name;  // "Train/Samples/train_loss"
  double value = 0;
  int64_t step = 0;  // DeepSpeed's x axis: samples trained so far
};

}  // namespace dslaunch::runtime

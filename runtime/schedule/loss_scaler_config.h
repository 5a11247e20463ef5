// The dynamic loss scaler's settings: ds_config's "fp16" section, as DeepSpeed
// spells it. Here, beside the scaler, so that runtime/schedule needs nothing
// from runtime/config (config includes this to parse the section).
#pragma once

namespace dslaunch::runtime {

struct Fp16Config {
  bool enabled = false;
  bool auto_cast = false;
  double loss_scale = 0;          // 0: dynamic
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
};

}  // namespace dslaunch::runtime

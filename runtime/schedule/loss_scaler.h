// The fp16 loss scale: DeepSpeed's DynamicLossScaler
// (deepspeed/runtime/fp16/loss_scaler.py, update_scale) step for step, and its
// static LossScaler.
//
// Note [Dynamic loss scale]
// Configured by the ds_config `fp16` section (fp16.loss_scale == 0):
//   scale starts at 2^initial_scale_power; factor 2; hysteresis starts at
//   `hysteresis` (DeepSpeed's delayed_shift).
//   Update(overflow = true):
//     if hysteresis == 1 (or the configured hysteresis is 1):
//       scale = max(scale / 2, min_loss_scale)
//       (DeepSpeed raises "Current loss scale already at minimum" when the
//       scale already equals min_loss_scale; we keep the minimum, count it in
//       overflows_at_min_scale() and go on: DeepSpeed #5426)
//     else hysteresis -= 1 (scale unchanged)
//     last_overflow_iteration = iteration
//   Update(overflow = false):
//     if consecutive_hysteresis: hysteresis = configured value
//     if (iteration - last_overflow_iteration) % loss_scale_window == 0:
//       hysteresis = configured value (without consecutive_hysteresis)
//       scale *= 2
//   iteration += 1 (every call)
// last_overflow_iteration starts at -1, so the first doubling comes after
// loss_scale_window clean updates, and later ones every loss_scale_window
// updates after the last overflow (an overflow absorbed by hysteresis also
// restarts the window). Without consecutive_hysteresis the hysteresis budget
// only refills when the scale grows; with it, any clean step refills it.
//
// Static (fp16.loss_scale > 0): the scale never changes. fp16 disabled: a
// static scale of 1 (DeepSpeed's CreateLossScaler for other dtypes). An
// overflow still skips the step for both, as DeepSpeed's optimizers check
// overflow whether or not the scale is dynamic.
//
// Not thread-safe: one owner (the engine's step loop).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/schedule/loss_scaler_config.h"

namespace dslaunch::runtime {

class LossScaler {
 public:
  // Everything that changes during training; what a checkpoint stores.
  struct State {
    double scale = 1;
    int hysteresis = 1;                // remaining overflows tolerated (cur_hysteresis)
    int64_t last_overflow_iteration = -1;
    int64_t iteration = 0;             // Update() calls so far (cur_iter)
    int64_t skipped_steps = 0;         // Update(true) calls so far
    int64_t overflows_at_min_scale = 0;
    bool operator==(const State&) const = default;
  };

  // An error (naming fp16.<key>=<value>) when an enabled config is invalid:
  // loss_scale < 0, initial_scale_power outside [0, 1023], loss_scale_window
  // < 1, hysteresis < 1, min_loss_scale <= 0.
  static absl::Status Validate(const Fp16Config& config);
  static absl::StatusOr<LossScaler> Create(const Fp16Config& config);

  // REQUIRES: Validate(config).ok().
  explicit LossScaler(const Fp16Config& config);

  bool dynamic() const { return dynamic_; }
  // Multiply the loss by this before backward; divide gradients by it.
  double scale() const { return state_.scale; }

  // Records the outcome of one optimizer step (`overflow`: some gradient was
  // inf/nan) and adjusts the scale for the next one. Returns true when the
  // step must be skipped (exactly when `overflow`).
  bool Update(bool overflow);

  int64_t skipped_steps() const { return state_.skipped_steps; }
  // Overflows that happened with the scale already at min_loss_scale and no
  // hysteresis left: where DeepSpeed aborts the run. Nonzero means fp16 cannot
  // represent this model's gradients even at the minimum scale.
  int64_t overflows_at_min_scale() const { return state_.overflows_at_min_scale; }
  bool at_min_scale() const { return dynamic_ && state_.scale <= min_scale_; }

  State state() const { return state_; }
  // Continues from a saved State. A static scaler keeps its configured scale
  // (the config decides it) and restores only the counters.
  void Restore(const State& state);

 private:
  bool dynamic_ = false;
  int configured_hysteresis_ = 1;  // DeepSpeed's delayed_shift
  bool consecutive_hysteresis_ = false;
  int64_t window_ = 1000;
  double min_scale_ = 1;
  State state_;
};

}  // namespace dslaunch::runtime

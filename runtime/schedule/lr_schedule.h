// Learning-rate schedules: DeepSpeed's five schedulers
// (deepspeed/runtime/lr_schedules.py) and the constant lr, as pure functions of
// the optimizer step index.
//
// Note [LrAt(k) convention]
// LrAt(k) is the lr that optimizer step k (k = 0, 1, 2, ...; counting only the
// steps that were applied, not those skipped on an fp16 overflow) runs with.
// The engine asks LrAt(successful_steps_so_far) before each step; a resumed
// job asks with the restored count and gets the same value, so the only state
// to checkpoint is that count.
//
// This is exactly what a DeepSpeed optimizer sees:
//   * every scheduler is built with last_batch_iteration = -1 and its
//     constructor writes an initial lr into the optimizer (the formula's value
//     at last_batch_iteration = -1, see the per-schedule notes: WarmupCosineLR
//     writes 0);
//   * the engine calls scheduler.step() after each optimizer step that was not
//     skipped for overflow (engine._take_model_step), which increments
//     last_batch_iteration and writes get_lr() into the optimizer.
// So optimizer step k runs with get_lr() at last_batch_iteration = k - 1, and
// step 0 with the constructor's value. In DeepSpeed's own variable:
//
//   LrAt(k) == lr written by the scheduler when last_batch_iteration == k - 1
//
// (equivalently LrAt(k) is the lr after k scheduler steps). The formulas in
// lr_schedule.cc are written in k; where DeepSpeed uses last_batch_iteration + 1
// that is k.
//
// Note [OneCycle momentum]
// With cycle_momentum, DeepSpeed's OneCycle also owns the optimizer's betas: it
// writes (beta1, 0.99), overriding the configured beta2, and at construction
// writes (cycle_min_mom, 0.99) although its own formula gives cycle_max_mom at
// the start of the cycle (so step 0 runs with cycle_min_mom and step 1 with
// nearly cycle_max_mom). Beta1At/Beta2At reproduce both quirks; every other
// schedule leaves the betas alone (nullopt).
//
// Note [OneCycle stair counts]
// cycle_first_stair_count / cycle_second_stair_count are accepted and validated
// but, as in DeepSpeed (which stores and never reads them), do not change the
// curve: the cycle is always continuous.
//
// Note [WarmupCosineLR past total_num_steps]
// DeepSpeed's cosine keeps going past total_num_steps, so the lr climbs back
// towards the base lr (it returns to it at 2 * total - warmup steps). We hold
// cos_min_ratio from total_num_steps on instead; up to total_num_steps the
// values are DeepSpeed's.
//
// Thread-safe: schedules are immutable after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "runtime/schedule/lr_schedule_config.h"

namespace dslaunch::runtime {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;

  // The lr of optimizer step `step` (Note [LrAt(k) convention]). A negative
  // step is treated as 0.
  virtual double LrAt(int64_t step) const = 0;

  // Adam's beta1 for that step when the schedule cycles momentum (OneCycle
  // with cycle_momentum); nullopt: keep the optimizer's configured beta1.
  virtual std::optional<double> Beta1At(int64_t step) const { return std::nullopt; }

  // Adam's beta2 when the schedule overrides it (OneCycle with cycle_momentum
  // sets 0.99, Note [OneCycle momentum]); nullopt: keep the configured beta2.
  virtual std::optional<double> Beta2At(int64_t step) const { return std::nullopt; }

  // The DeepSpeed scheduler name ("WarmupLR", ...), or "constant".
  virtual const char* type() const = 0;
};

// The schedule `config` describes for an optimizer whose configured lr is
// `optimizer_lr` (the constant lr when config.type is empty, and the base of
// WarmupCosineLR's ratios). Every invalid value is reported at once, one per
// line, as InvalidArgument naming the key (`scheduler.params.total_num_steps`)
// and its value; an unknown type names the valid ones.
absl::StatusOr<std::unique_ptr<LrSchedule>> MakeLrSchedule(const SchedulerConfig& config,
                                                           double optimizer_lr);

}  // namespace dslaunch::runtime

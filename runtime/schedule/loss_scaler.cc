#include "runtime/schedule/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dslaunch::runtime {
namespace {

constexpr double kScaleFactor = 2;  // DeepSpeed's scale_factor; not configurable there either

}  // namespace

absl::Status LossScaler::Validate(const Fp16Config& config) {
  if (!config.enabled) return absl::OkStatus();
  std::vector<std::string> problems;
  if (!std::isfinite(config.loss_scale) || config.loss_scale < 0) {
    problems.push_back(absl::StrCat("fp16.loss_scale=", config.loss_scale,
                                    ": must be >= 0 (0: dynamic loss scaling)"));
  }
  const bool dynamic = config.loss_scale == 0;
  if (dynamic) {
    if (config.initial_scale_power < 0 || config.initial_scale_power > 1023) {
      problems.push_back(absl::StrCat("fp16.initial_scale_power=", config.initial_scale_power,
                                      ": must be in [0, 1023]"));
    }
    if (config.loss_scale_window < 1) {
      problems.push_back(
          absl::StrCat("fp16.loss_scale_window=", config.loss_scale_window, ": must be >= 1"));
    }
    if (config.hysteresis < 1) {
      problems.push_back(absl::StrCat("fp16.hysteresis=", config.hysteresis, ": must be >= 1"));
    }
    if (!std::isfinite(config.min_loss_scale) || config.min_loss_scale <= 0) {
      problems.push_back(
          absl::StrCat("fp16.min_loss_scale=", config.min_loss_scale, ": must be > 0"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
}

absl::StatusOr<LossScaler> LossScaler::Create(const Fp16Config& config) {
  if (absl::Status status = Validate(config); !status.ok()) return status;
  return LossScaler(config);
}

LossScaler::LossScaler(const Fp16Config& config) {
  if (!config.enabled) {
    state_.scale = 1;
    return;
  }
  dynamic_ = config.loss_scale == 0;
  if (!dynamic_) {
    state_.scale = config.loss_scale;
    return;
  }
  configured_hysteresis_ = config.hysteresis;
  consecutive_hysteresis_ = config.consecutive_hysteresis;
  window_ = config.loss_scale_window;
  min_scale_ = config.min_loss_scale;
  state_.scale = std::ldexp(1.0, config.initial_scale_power);
  state_.hysteresis = configured_hysteresis_;
}

bool LossScaler::Update(bool overflow) {
  State& s = state_;
  if (dynamic_) {
    if (overflow) {
      if (configured_hysteresis_ == 1 || s.hysteresis == 1) {
        if (s.scale == min_scale_) ++s.overflows_at_min_scale;  // DeepSpeed raises here
        s.scale = std::max(s.scale / kScaleFactor, min_scale_);
      } else {
        --s.hysteresis;
      }
      s.last_overflow_iteration = s.iteration;
    } else {
      if (consecutive_hysteresis_) s.hysteresis = configured_hysteresis_;
      if ((s.iteration - s.last_overflow_iteration) % window_ == 0) {
        if (!consecutive_hysteresis_) s.hysteresis = configured_hysteresis_;
        s.scale *= kScaleFactor;
      }
    }
  }
  ++s.iteration;
  if (overflow) ++s.skipped_steps;
  return overflow;
}

void LossScaler::Restore(const State& state) {
  const double configured_scale = state_.scale;
  state_ = state;
  if (!dynamic_) state_.scale = configured_scale;
}

}  // namespace dslaunch::runtime

#include "runtime/schedule/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace dslaunch::runtime {
namespace {

// Every formula below is written in k, the optimizer step index; DeepSpeed's
// last_batch_iteration is k - 1 (Note [LrAt(k) convention]).

class ConstantLr final : public LrSchedule {
 public:
  explicit ConstantLr(double lr) : lr_(lr) {}
  double LrAt(int64_t) const override { return lr_; }
  const char* type() const override { return "constant"; }

 private:
  const double lr_;
};

// lr = min_lr * (1 + step_rate * interval), interval = k / step_size, or its
// floor with staircase. DeepSpeed's interval uses last_batch_iteration + 1 = k,
// so the constructor's min_lr is the k = 0 value of the same formula.
class LrRangeTest final : public LrSchedule {
 public:
  explicit LrRangeTest(const SchedulerConfig& c)
      : min_lr_(c.lr_range_test_min_lr),
        step_size_(static_cast<double>(c.lr_range_test_step_size)),
        step_rate_(c.lr_range_test_step_rate),
        staircase_(c.lr_range_test_staircase) {}

  double LrAt(int64_t step) const override {
    const double k = static_cast<double>(std::max<int64_t>(step, 0));
    const double interval = staircase_ ? std::floor(k / step_size_) : k / step_size_;
    return min_lr_ * (1 + step_rate_ * interval);
  }
  const char* type() const override { return "LRRangeTest"; }

 private:
  const double min_lr_;
  const double step_size_;
  const double step_rate_;
  const bool staircase_;
};

// One triangular cycle of total = first + second steps (lr up from cycle_min_lr
// to cycle_max_lr over the first part, back down over the second), then a decay
// phase: lr = cycle_min_lr / (1 + decay_lr_rate * d / decay_step_size) with
// d = k - total steps past the cycle (no decay when either is 0). Momentum
// moves the other way, between cycle_max_mom and cycle_min_mom, then
// cycle_max_mom * (1 + decay_mom_rate * d / decay_step_size).
class OneCycle final : public LrSchedule {
 public:
  explicit OneCycle(const SchedulerConfig& c)
      : min_lr_(c.cycle_min_lr),
        max_lr_(c.cycle_max_lr),
        decay_lr_rate_(c.decay_lr_rate),
        decay_step_size_(static_cast<double>(c.decay_step_size)),
        cycle_momentum_(c.cycle_momentum),
        min_mom_(c.cycle_min_mom),
        max_mom_(c.cycle_max_mom),
        decay_mom_rate_(c.decay_mom_rate) {
    const double first = static_cast<double>(c.cycle_first_step_size);
    const double second = c.cycle_second_step_size == -1
                              ? first
                              : static_cast<double>(c.cycle_second_step_size);
    total_size_ = first + second;
    step_ratio_ = first / total_size_;
    skip_lr_decay_ = c.decay_step_size == 0 || c.decay_lr_rate == 0;
    skip_mom_decay_ = c.decay_step_size == 0 || c.decay_mom_rate == 0;
  }

  double LrAt(int64_t step) const override {
    const int64_t k = std::max<int64_t>(step, 0);
    if (InCycle(k)) return min_lr_ + (max_lr_ - min_lr_) * ScaleFactor(k);
    if (skip_lr_decay_) return min_lr_;
    return min_lr_ / (1 + decay_lr_rate_ * (DecaySteps(k) / decay_step_size_));
  }

  std::optional<double> Beta1At(int64_t step) const override {
    if (!cycle_momentum_) return std::nullopt;
    const int64_t k = std::max<int64_t>(step, 0);
    if (k == 0) return min_mom_;  // the constructor's value (Note [OneCycle momentum])
    if (InCycle(k)) return max_mom_ - (max_mom_ - min_mom_) * ScaleFactor(k);
    if (skip_mom_decay_) return max_mom_;
    return max_mom_ * (1 + decay_mom_rate_ * (DecaySteps(k) / decay_step_size_));
  }

  std::optional<double> Beta2At(int64_t) const override {
    if (!cycle_momentum_) return std::nullopt;
    return 0.99;
  }

  const char* type() const override { return "OneCycle"; }

 private:
  // DeepSpeed: last_batch_iteration < total_size.
  bool InCycle(int64_t k) const { return static_cast<double>(k - 1) < total_size_; }
  // DeepSpeed: last_batch_iteration - total_size + 1.
  double DecaySteps(int64_t k) const { return static_cast<double>(k) - total_size_; }

  // Position in the triangle, 0 at the ends, 1 at the peak.
  double ScaleFactor(int64_t k) const {
    const double progress = static_cast<double>(k) / total_size_;
    const double cycle = std::floor(1 + progress);
    const double x = 1. + progress - cycle;
    if (x <= step_ratio_) return x / step_ratio_;
    return (x - 1) / (step_ratio_ - 1);
  }

  const double min_lr_;
  const double max_lr_;
  const double decay_lr_rate_;
  const double decay_step_size_;
  const bool cycle_momentum_;
  const double min_mom_;
  const double max_mom_;
  const double decay_mom_rate_;
  double total_size_ = 0;
  double step_ratio_ = 0;
  bool skip_lr_decay_ = false;
  bool skip_mom_decay_ = false;
};

// DeepSpeed's warmup length: at least 2 (log(1) would be 0).
int64_t EffectiveWarmup(int64_t warmup_num_steps) { return std::max<int64_t>(2, warmup_num_steps); }

// The warmup fraction in [0, 1] for k >= 1 while k - 1 < warmup:
// log(k) / log(warmup) or (k - 1) / warmup.
class WarmupCurve {
 public:
  WarmupCurve(int64_t warmup_num_steps, bool linear)
      : warmup_(EffectiveWarmup(warmup_num_steps)),
        linear_(linear),
        inverse_log_warmup_(1.0 / std::log(static_cast<double>(warmup_))) {}

  int64_t warmup() const { return warmup_; }
  bool InWarmup(int64_t k) const { return k - 1 < warmup_; }
  double Fraction(int64_t k) const {
    if (linear_) return static_cast<double>(k - 1) / static_cast<double>(warmup_);
    return inverse_log_warmup_ * std::log(static_cast<double>(k));
  }

 private:
  int64_t warmup_;
  bool linear_;
  double inverse_log_warmup_;
};

// WarmupLR (total_num_steps < 0: hold warmup_max_lr after warmup) and
// WarmupDecayLR (linear decay to warmup_min_lr, reached at k = total + 1).
// Step 0 runs with warmup_min_lr (the constructor's value).
class WarmupLr final : public LrSchedule {
 public:
  WarmupLr(const SchedulerConfig& c, bool decay)
      : min_lr_(c.warmup_min_lr),
        delta_lr_(c.warmup_max_lr - c.warmup_min_lr),
        curve_(c.warmup_num_steps, c.warmup_type == "linear"),
        decay_(decay),
        total_num_steps_(c.total_num_steps) {}

  double LrAt(int64_t step) const override { return min_lr_ + delta_lr_ * Gamma(step); }
  const char* type() const override { return decay_ ? "WarmupDecayLR" : "WarmupLR"; }

 private:
  double Gamma(int64_t step) const {
    const int64_t k = std::max<int64_t>(step, 0);
    if (k == 0) return 0;
    if (curve_.InWarmup(k)) return curve_.Fraction(k);
    if (!decay_) return 1;
    const double remaining = static_cast<double>(total_num_steps_ - (k - 1));
    const double span = std::max(1.0, static_cast<double>(total_num_steps_ - curve_.warmup()));
    return std::max(0.0, remaining / span);
  }

  const double min_lr_;
  const double delta_lr_;
  const WarmupCurve curve_;
  const bool decay_;
  const int64_t total_num_steps_;
};

// Ratios of the optimizer's lr: warmup from warmup_min_ratio to 1, then a
// half cosine from 1 to cos_min_ratio over total - warmup steps. Step 0 runs
// with lr 0: DeepSpeed's constructor writes get_lr() at last_batch_iteration
// -1, which is 0 for this schedule.
class WarmupCosineLr final : public LrSchedule {
 public:
  WarmupCosineLr(const SchedulerConfig& c, double base_lr)
      : base_lr_(base_lr),
        warmup_min_ratio_(c.warmup_min_ratio),
        cos_min_ratio_(c.cos_min_ratio),
        curve_(c.warmup_num_steps, c.warmup_type == "linear"),
        total_num_steps_(c.total_num_steps) {}

  double LrAt(int64_t step) const override { return base_lr_ * Ratio(std::max<int64_t>(step, 0)); }
  const char* type() const override { return "WarmupCosineLR"; }

 private:
  double Ratio(int64_t k) const {
    if (k == 0) return 0;
    if (curve_.InWarmup(k)) {
      return warmup_min_ratio_ + curve_.Fraction(k) * (1. - warmup_min_ratio_);
    }
    // DeepSpeed: real_last_step = last_batch_iteration - warmup + 1.
    const int64_t done = k - curve_.warmup();
    const int64_t span = total_num_steps_ - curve_.warmup();
    // Note [WarmupCosineLR past total_num_steps].
    if (done >= span) return std::max(0.0, cos_min_ratio_);
    const double cosine =
        (1 + std::cos(std::numbers::pi * static_cast<double>(done) / static_cast<double>(span))) /
        2;
    return std::max(0.0, cos_min_ratio_ + (1. - cos_min_ratio_) * cosine);
  }

  const double base_lr_;
  const double warmup_min_ratio_;
  const double cos_min_ratio_;
  const WarmupCurve curve_;
  const int64_t total_num_steps_;
};

// Collects every problem of a scheduler section (Note [Config strictness]).
class Problems {
 public:
  template <typename T>
  void Add(absl::string_view key, T value, absl::string_view why) {
    lines_.push_back(absl::StrCat("scheduler.params.", key, "=", value, ": ", why));
  }
  void AddLine(std::string line) { lines_.push_back(std::move(line)); }

  void RequireFinite(absl::string_view key, double value) {
    if (!std::isfinite(value)) Add(key, value, "must be a finite number");
  }
  void RequireNonNegative(absl::string_view key, double value) {
    if (!std::isfinite(value) || value < 0) Add(key, value, "must be a finite number >= 0");
  }
  void RequireRatio(absl::string_view key, double value) {
    if (!std::isfinite(value) || value < 0 || value > 1) Add(key, value, "must be in [0, 1]");
  }

  absl::Status ToStatus() const {
    if (lines_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(lines_, "\n"));
  }

 private:
  std::vector<std::string> lines_;
};

void CheckWarmup(const SchedulerConfig& c, Problems& problems) {
  if (c.warmup_num_steps < 0) {
    problems.Add("warmup_num_steps", c.warmup_num_steps, "must be >= 0");
  }
  if (c.warmup_type != "log" && c.warmup_type != "linear") {
    problems.Add("warmup_type", absl::StrCat("\"", c.warmup_type, "\""),
                 "must be \"log\" or \"linear\"");
  }
}

void CheckTotalAfterWarmup(const SchedulerConfig& c, Problems& problems) {
  const int64_t warmup = EffectiveWarmup(c.warmup_num_steps);
  if (c.total_num_steps <= warmup) {
    problems.Add("total_num_steps", c.total_num_steps,
                 absl::StrCat("must be greater than warmup_num_steps=", c.warmup_num_steps,
                              c.warmup_num_steps < warmup
                                  ? absl::StrCat(" (DeepSpeed warms up for at least ", warmup,
                                                 " steps)")
                                  : std::string()));
  }
}

void CheckLrRangeTest(const SchedulerConfig& c, Problems& problems) {
  problems.RequireNonNegative("lr_range_test_min_lr", c.lr_range_test_min_lr);
  if (c.lr_range_test_step_size <= 0) {
    problems.Add("lr_range_test_step_size", c.lr_range_test_step_size, "must be > 0");
  }
  problems.RequireNonNegative("lr_range_test_step_rate", c.lr_range_test_step_rate);
}

void CheckOneCycle(const SchedulerConfig& c, Problems& problems) {
  problems.RequireNonNegative("cycle_min_lr", c.cycle_min_lr);
  if (!std::isfinite(c.cycle_max_lr) || c.cycle_max_lr <= 0) {
    problems.Add("cycle_max_lr", c.cycle_max_lr, "must be > 0");
  } else if (c.cycle_max_lr < c.cycle_min_lr) {
    problems.Add("cycle_max_lr", c.cycle_max_lr,
                 absl::StrCat("must be >= cycle_min_lr=", c.cycle_min_lr));
  }
  if (c.cycle_first_step_size <= 0) {
    problems.Add("cycle_first_step_size", c.cycle_first_step_size, "must be > 0");
  }
  if (c.cycle_second_step_size < -1) {
    problems.Add("cycle_second_step_size", c.cycle_second_step_size,
                 "must be >= 0, or -1 for cycle_first_step_size");
  }
  if (c.cycle_first_stair_count < 0) {
    problems.Add("cycle_first_stair_count", c.cycle_first_stair_count, "must be >= 0");
  }
  if (c.cycle_second_stair_count < -1) {
    problems.Add("cycle_second_stair_count", c.cycle_second_stair_count,
                 "must be >= 0, or -1 for cycle_first_stair_count");
  }
  if (c.decay_step_size < 0) {
    problems.Add("decay_step_size", c.decay_step_size, "must be >= 0 (0: no decay)");
  }
  problems.RequireNonNegative("decay_lr_rate", c.decay_lr_rate);
  if (c.cycle_momentum) {
    problems.RequireFinite("cycle_min_mom", c.cycle_min_mom);
    problems.RequireFinite("cycle_max_mom", c.cycle_max_mom);
    problems.RequireFinite("decay_mom_rate", c.decay_mom_rate);
  }
}

constexpr const char* kKnownTypes =
    "LRRangeTest, OneCycle, WarmupLR, WarmupDecayLR, WarmupCosineLR";

}  // namespace

absl::StatusOr<std::unique_ptr<LrSchedule>> MakeLrSchedule(const SchedulerConfig& config,
                                                           double optimizer_lr) {
  Problems problems;
  if (!std::isfinite(optimizer_lr) || optimizer_lr < 0) {
    problems.AddLine(absl::StrCat("optimizer.params.lr=", optimizer_lr,
                                  ": must be a finite number >= 0"));
  }
  const std::string& type = config.type;
  if (type.empty()) {
    // Constant lr: no scheduler parameters apply.
  } else if (type == "LRRangeTest") {
    CheckLrRangeTest(config, problems);
  } else if (type == "OneCycle") {
    CheckOneCycle(config, problems);
  } else if (type == "WarmupLR" || type == "WarmupDecayLR") {
    problems.RequireNonNegative("warmup_min_lr", config.warmup_min_lr);
    problems.RequireNonNegative("warmup_max_lr", config.warmup_max_lr);
    CheckWarmup(config, problems);
    if (type == "WarmupDecayLR") CheckTotalAfterWarmup(config, problems);
  } else if (type == "WarmupCosineLR") {
    problems.RequireRatio("warmup_min_ratio", config.warmup_min_ratio);
    problems.RequireRatio("cos_min_ratio", config.cos_min_ratio);
    CheckWarmup(config, problems);
    CheckTotalAfterWarmup(config, problems);
  } else {
    problems.AddLine(absl::StrCat("scheduler.type=\"", type, "\": unknown scheduler (known: ",
                                  kKnownTypes, ")"));
  }
  if (absl::Status status = problems.ToStatus(); !status.ok()) return status;

  if (type.empty()) return std::make_unique<ConstantLr>(optimizer_lr);
  if (type == "LRRangeTest") return std::make_unique<LrRangeTest>(config);
  if (type == "OneCycle") return std::make_unique<OneCycle>(config);
  if (type == "WarmupLR") return std::make_unique<WarmupLr>(config, /*decay=*/false);
  if (type == "WarmupDecayLR") return std::make_unique<WarmupLr>(config, /*decay=*/true);
  return std::make_unique<WarmupCosineLr>(config, optimizer_lr);
}

}  // namespace dslaunch::runtime

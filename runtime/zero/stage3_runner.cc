#include "runtime/zero/stage3_runner.h"

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace {

// Identity in forward; in backward, calls `Hook` for the unit: the entry's
// backward runs once the unit's backward is over, the exit's before it begins.
template <void (Stage3Runner::*Hook)(int)>
class UnitBoundary : public torch::autograd::Function<UnitBoundary<Hook>> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               Stage3Runner* runner, int64_t unit) {
    ctx->saved_data["runner"] = reinterpret_cast<int64_t>(runner);
    ctx->saved_data["unit"] = unit;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* runner = reinterpret_cast<Stage3Runner*>(ctx->saved_data["runner"].toInt());
    (runner->*Hook)(static_cast<int>(ctx->saved_data["unit"].toInt()));
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

using UnitEntry = UnitBoundary<&Stage3Runner::AfterUnitBackward>;
using UnitExit = UnitBoundary<&Stage3Runner::BeforeUnitBackward>;

}  // namespace

Stage3Runner::Stage3Runner(const std::vector<ParameterUnit>& units, ZeroPartition* zero, ZeroPartition* frozen,
                           int64_t prefetch_elements, int64_t max_live_elements)
    : zero_(zero), frozen_(frozen), prefetch_elements_(prefetch_elements), max_live_elements_(max_live_elements) {
  if (units.empty()) {
    // A model without units: one root unit of everything.
    layer_ = {false};
    trainable_unit_ = {0};
    frozen_unit_ = {frozen != nullptr ? 0 : -1};
    return;
  }
  for (const ParameterUnit& unit : units) layer_.push_back(unit.layer);
  TrainableSide(units, &trainable_unit_);
  FrozenSide(units, &frozen_unit_);
  if (frozen_ == nullptr) frozen_unit_.assign(units.size(), -1);
}

void Stage3Runner::Check(const absl::Status& status, const char* what, int unit) const {
  TORCH_CHECK(status.ok(), "ZeRO-3 ", what, " of unit ", unit, ": ", std::string(status.message()));
}

absl::Status Stage3Runner::StartGather(int unit) {
  if (const int t = trainable_unit_[unit]; t >= 0) {
    if (absl::Status s = zero_->StartGather(t); !s.ok()) return s;
  }
  if (const int f = frozen_unit_[unit]; f >= 0) return frozen_->StartGather(f);
  return absl::OkStatus();
}

absl::Status Stage3Runner::GatherUnit(int unit, bool frozen_too) {
  if (const int t = trainable_unit_[unit]; t >= 0) {
    if (absl::Status s = zero_->GatherUnit(t); !s.ok()) return s;
  }
  if (const int f = frozen_unit_[unit]; f >= 0 && frozen_too) return frozen_->GatherUnit(f);
  return absl::OkStatus();
}

void Stage3Runner::ReleaseUnit(int unit) {
  if (const int t = trainable_unit_[unit]; t >= 0) zero_->ReleaseUnit(t);
  if (const int f = frozen_unit_[unit]; f >= 0) frozen_->ReleaseUnit(f);
}

int64_t Stage3Runner::Elements(int unit) const {
  int64_t elements = 0;
  if (const int t = trainable_unit_[unit]; t >= 0) elements += zero_->UnitElements(t);
  if (const int f = frozen_unit_[unit]; f >= 0) elements += frozen_->UnitElements(f);
  return elements;
}

int64_t Stage3Runner::LiveElements() const {
  return zero_->LiveElements() + (frozen_ != nullptr ? frozen_->LiveElements() : 0);
}

void Stage3Runner::BeginForward() {
  if (!gather_) return;
  for (int u = 0; u < static_cast<int>(layer_.size()); ++u) {
    if (!layer_[u]) Check(GatherUnit(u), "gather", u);
  }
}

void Stage3Runner::Prefetch(int unit, int step) {
  if (prefetch_elements_ <= 0) return;
  for (int next = unit + step; next >= 0 && next < static_cast<int>(layer_.size()); next += step) {
    if (!layer_[next]) continue;
    const int64_t elements = Elements(next);
    if (elements <= prefetch_elements_ && LiveElements() + elements <= max_live_elements_) {
      Check(StartGather(next), "prefetch", next);
    }
    return;
  }
}

torch::Tensor Stage3Runner::Run(int unit, const Segment& segment, const torch::Tensor& x) {
  TORCH_CHECK(unit >= 0 && unit < static_cast<int>(layer_.size()) && layer_[unit],
              "ZeRO-3: unit ", unit, " is not a layer unit of this model");
  if (gather_) {
    Check(GatherUnit(unit), "gather", unit);
    Prefetch(unit, +1);
  }
  torch::Tensor y;
  if (torch::GradMode::is_enabled() && x.requires_grad()) {
    y = UnitExit::apply(segment(UnitEntry::apply(x, this, unit)), this, unit);
  } else if (torch::GradMode::is_enabled()) {
    // The input needs no gradient (nothing before the unit is trainable):
    // only the exit marks the unit; FinishBackward collects its gradients.
    y = UnitExit::apply(segment(x), this, unit);
  } else {
    y = segment(x);
  }
  ReleaseUnit(unit);
  return y;
}

void Stage3Runner::BeforeUnitBackward(int unit) {
  if (!gather_) return;
  Check(GatherUnit(unit), "gather", unit);
  Prefetch(unit, -1);
}

void Stage3Runner::AfterUnitBackward(int unit) {
  if (const int t = trainable_unit_[unit]; t >= 0) Check(zero_->AccumulateUnitGradients(t), "reduce-scatter", unit);
  ReleaseUnit(unit);
}

absl::Status Stage3Runner::FinishBackward() {
  for (int u = 0; u < zero_->units(); ++u) {
    if (zero_->UnitHasGradients(u)) {
      absl::Status s = zero_->AccumulateUnitGradients(u);
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat("ZeRO-3 reduce-scatter of unit ", u, ": ", s.message()));
    }
    zero_->ReleaseUnit(u);
  }
  if (frozen_ != nullptr) {
    for (int u = 0; u < frozen_->units(); ++u) frozen_->ReleaseUnit(u);
    if (absl::Status s = frozen_->Drain(); !s.ok()) return s;
  }
  return zero_->Drain();
}

absl::Status Stage3Runner::GatherAll(bool frozen_too) {
  if (!gather_) return absl::OkStatus();
  for (ZeroPartition* side : {zero_, frozen_too ? frozen_ : nullptr}) {
    for (int u = 0; side != nullptr && u < side->units(); ++u) {
      if (absl::Status s = side->GatherUnit(u); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime

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

void Stage3Runner::Check(const absl::Status& status, const char* what, int unit) const {
  TORCH_CHECK(status.ok(), "ZeRO-3 ", what, " of unit ", unit, ": ", std::string(status.message()));
}

void Stage3Runner::BeginForward() {
  if (!gather_) return;
  for (int u = 0; u < zero_->units(); ++u) {
    if (!zero_->unit_is_layer(u)) Check(zero_->GatherUnit(u), "gather", u);
  }
}

void Stage3Runner::Prefetch(int unit, int step) {
  if (prefetch_elements_ <= 0) return;
  for (int next = unit + step; next >= 0 && next < zero_->units(); next += step) {
    if (!zero_->unit_is_layer(next)) continue;
    const int64_t elements = zero_->UnitElements(next);
    if (elements <= prefetch_elements_ && zero_->LiveElements() + elements <= max_live_elements_) {
      Check(zero_->StartGather(next), "prefetch", next);
    }
    return;
  }
}

torch::Tensor Stage3Runner::Run(int unit, const Segment& segment, const torch::Tensor& x) {
  TORCH_CHECK(unit >= 0 && unit < zero_->units() && zero_->unit_is_layer(unit),
              "ZeRO-3: unit ", unit, " is not a layer unit of this model");
  if (gather_) {
    Check(zero_->GatherUnit(unit), "gather", unit);
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
  zero_->ReleaseUnit(unit);
  return y;
}

void Stage3Runner::BeforeUnitBackward(int unit) {
  if (!gather_) return;
  Check(zero_->GatherUnit(unit), "gather", unit);
  Prefetch(unit, -1);
}

void Stage3Runner::AfterUnitBackward(int unit) {
  Check(zero_->AccumulateUnitGradients(unit), "reduce-scatter", unit);
  zero_->ReleaseUnit(unit);
}

absl::Status Stage3Runner::FinishBackward() {
  for (int u = 0; u < zero_->units(); ++u) {
    if (zero_->UnitHasGradients(u)) {
      absl::Status s = zero_->AccumulateUnitGradients(u);
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat("ZeRO-3 reduce-scatter of unit ", u, ": ", s.message()));
    }
    zero_->ReleaseUnit(u);
  }
  return zero_->Drain();
}

absl::Status Stage3Runner::GatherAll() {
  if (!gather_) return absl::OkStatus();
  for (int u = 0; u < zero_->units(); ++u) {
    if (absl::Status s = zero_->GatherUnit(u); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime

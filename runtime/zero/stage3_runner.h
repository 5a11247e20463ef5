// The engine's UnitRunner for ZeRO stage 3 (Note [ZeRO-3 units]).
//
// Run(unit, segment, x) computes Post(segment(Pre(x))) where Pre and Post are
// identity autograd functions that mark the unit's boundaries for backward:
//   forward:  gather the unit -> segment -> release it
//   backward: Post's backward runs before the unit's (gather it again);
//             Pre's backward runs after it (reduce-scatter the unit's
//             gradients to their owners, release the unit).
// Autograd runs a ready node with a higher sequence number first, so the
// unit's own nodes (created after Pre) and their gradient accumulation finish
// before Pre's backward. FinishBackward() then sweeps whatever the pass left:
// root units, gradients that arrived late, units whose input needed no
// gradient. The sweep visits units in order on every rank, so the
// collectives stay matched.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "runtime/model/parameter_units.h"
#include "runtime/zero/zero_partition.h"

namespace dslaunch::runtime {

class Stage3Runner : public UnitRunner {
 public:
  // `units` are the model's (PartitionedModel::ParameterUnits()): `zero`
  // partitions their trainable side (TrainableSide), `frozen` their frozen
  // side (FrozenSide; null when the model has no frozen parameters), and a
  // unit is gathered and released on both sides at once (Note [Frozen
  // parameters at ZeRO-3]).
  //
  // Note [ZeRO-3 prefetch]: while a layer unit runs (forward) or before its
  // backward, the next layer unit in that direction is gathered ahead when it
  // has at most `prefetch_elements` elements and the gathered total stays
  // within `max_live_elements` (stage3_prefetch_bucket_size,
  // stage3_max_live_parameters). 0: no prefetch.
  Stage3Runner(const std::vector<ParameterUnit>& units, ZeroPartition* zero, ZeroPartition* frozen,
               int64_t prefetch_elements, int64_t max_live_elements);
  // Stage 2 with overlap_comm: the parameters are whole; only the unit
  // boundaries are kept, so each unit's gradients are reduce-scattered on the
  // comm worker as soon as its backward is over.
  static std::unique_ptr<Stage3Runner> GradientsOnly(const std::vector<ParameterUnit>& units, ZeroPartition* zero) {
    auto runner = std::make_unique<Stage3Runner>(units, zero, nullptr, 0, 0);
    runner->gather_ = false;
    return runner;
  }

  void BeginForward() override;
  torch::Tensor Run(int unit, const Segment& segment, const torch::Tensor& x) override;

  // After loss.backward(): reduce-scatter every gradient still held, release
  // every non-persistent unit.
  absl::Status FinishBackward();
  // Every unit whole (e.g. to read or export the parameters); they are
  // released again as the next step uses them. `frozen_too` false: the
  // trainable side only (an export of LoRA's adapters needs no base).
  absl::Status GatherAll(bool frozen_too = true);
  // Elements of full parameters alive now, on both sides.
  int64_t LiveElements() const;
  // Model unit `unit` whole on both sides, or released (persistent units
  // stay): for a reader that goes through the model unit by unit (Note
  // [Streamed export at ZeRO-3]). A gather is a collective.
  int units() const { return static_cast<int>(layer_.size()); }
  absl::Status GatherUnit(int unit, bool frozen_too = true);
  void ReleaseUnit(int unit);

  // Called by the boundary functions.
  void BeforeUnitBackward(int unit);
  void AfterUnitBackward(int unit);

 private:
  void Check(const absl::Status& status, const char* what, int unit) const;
  // Both sides of model unit `unit` (ZeroPartition::StartGather).
  absl::Status StartGather(int unit);
  int64_t Elements(int unit) const;
  // Starts gathering the nearest layer unit after `unit` (step +1) or before
  // it (step -1), within the prefetch and live bounds.
  void Prefetch(int unit, int step);

  ZeroPartition* const zero_;
  ZeroPartition* const frozen_;
  std::vector<bool> layer_;          // per model unit
  std::vector<int> trainable_unit_;  // per model unit: its unit in zero_ (-1: none)
  std::vector<int> frozen_unit_;     // per model unit: its unit in frozen_ (-1: none)
  const int64_t prefetch_elements_;
  const int64_t max_live_elements_;
  bool gather_ = true;  // false: stage 2 (GradientsOnly)
};

}  // namespace dslaunch::runtime

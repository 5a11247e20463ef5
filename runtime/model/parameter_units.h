// What a model provides so that ZeRO stage 3 can partition its parameters
// (Note [ZeRO-3 units]).
//
// LibTorch's C++ modules have no forward hooks, so stage 3 cannot gather a
// layer's parameters behind the model's back the way DeepSpeed does in
// Python. Instead the model names its units, FSDP-style, and routes each
// layer unit's forward through a UnitRunner that the engine installs:
//
//   class MyModel : public torch::nn::Module, public PartitionedModel { ... };
//   torch::Tensor MyModel::forward(x) {
//     if (runner_) runner_->BeginForward();           // gathers the root units
//     for (i, block) x = runner_ ? runner_->Run(unit_of(i), block_fn, x) : block_fn(x);
//   }
//
// A unit is a contiguous range of the module's trainable parameters in
// parameters() order, and a contiguous range of its frozen ones
// (requires_grad false: LoRA's base) in the same order; either may be empty.
// Stage 3 partitions both (Note [Frozen parameters at ZeRO-3]). Layer units are gathered just before their forward,
// freed right after it, gathered again just before their backward and freed
// (their gradients reduce-scattered to the owning ranks) right after it.
// Root units (embeddings used at both ends, final norms, ...) are gathered at
// BeginForward and freed when the backward pass is over.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "runtime/model/activation_checkpoint.h"

namespace dslaunch::runtime {

struct ParameterUnit {
  int64_t first_parameter = 0;  // index among the trainable parameters
  int64_t parameter_count = 0;
  bool layer = false;           // run through UnitRunner::Run; otherwise a root unit
  int64_t first_frozen = 0;     // index among the frozen parameters
  int64_t frozen_count = 0;
};

// Builds a model's units from its modules, counting each module's trainable
// and frozen parameter tensors apart.
class ParameterUnitList {
 public:
  // A unit of the modules' parameters; its index, or -1 when they hold none
  // (no unit is added).
  int Add(std::initializer_list<const torch::nn::Module*> modules, bool layer);
  std::vector<ParameterUnit> Take() { return std::move(units_); }

 private:
  std::vector<ParameterUnit> units_;
  int64_t next_trainable_ = 0;
  int64_t next_frozen_ = 0;
};

// One side of the units, as units of their own over that side's parameters
// (first_parameter/parameter_count), with the units that hold none of it
// left out; `index`, when given, receives per unit its index on that side
// (-1 where left out).
std::vector<ParameterUnit> TrainableSide(const std::vector<ParameterUnit>& units, std::vector<int>* index = nullptr);
std::vector<ParameterUnit> FrozenSide(const std::vector<ParameterUnit>& units, std::vector<int>* index = nullptr);

// The unit of each of the module's parameters, by name (its trainable or
// frozen index within a unit's range on that side); a parameter no unit
// covers is absent.
std::map<std::string, int> UnitOfEachParameter(const torch::nn::Module& module, const std::vector<ParameterUnit>& units);

class UnitRunner {
 public:
  virtual ~UnitRunner() = default;
  // Makes every root unit's parameters whole. Call once at the start of forward.
  virtual void BeginForward() = 0;
  // y = segment(x) with layer unit `unit` gathered for the forward and again
  // for the backward. Throws c10::Error when a collective fails.
  virtual torch::Tensor Run(int unit, const Segment& segment, const torch::Tensor& x) = 0;
};

class PartitionedModel {
 public:
  virtual ~PartitionedModel() = default;
  // The units, in parameter order, covering every trainable parameter once
  // and every frozen one once.
  virtual std::vector<ParameterUnit> ParameterUnits() const = 0;
  // nullptr: run without ZeRO-3 (every parameter is whole).
  virtual void SetUnitRunner(UnitRunner* runner) = 0;
};

}  // namespace dslaunch::runtime

// Note [Layer residency]: a model whose decoder layers' weights are not all
// on the device at once (ZeRO-Inference, Note [Streamed layer weights] in
// runtime/generate/streamed_layer_weights.h) tells its keeper around each
// layer it runs, in the order it runs them: BeforeLayer(i) returns once
// layer i's weights can be read by the work queued next on the current
// stream; AfterLayer(i) says the work queued so far is the last that reads
// them in this pass. Nothing waits on the host. Any order of layers is
// correct; the keeper makes the order it expects (0 .. L-1, forward after
// forward) fast.
#pragma once

#include <cstdint>
#include <string>

namespace dslaunch::runtime {

class LayerResidency {
 public:
  virtual ~LayerResidency() = default;
  virtual void BeforeLayer(int64_t layer) = 0;
  virtual void AfterLayer(int64_t layer) = 0;
  // One line for the tools: what lives where.
  virtual std::string Describe() const = 0;
};

}  // namespace dslaunch::runtime

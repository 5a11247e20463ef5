// Test support: data-parallel training steps of the small GPT through an
// engine, each rank reading its own rows of every global batch.
#pragma once

#include <vector>

#include "gtest/gtest.h"
#include "runtime/engine/engine.h"
#include "runtime/model/gpt.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime::testing {

// `steps` steps from `first_step` on rows [step*global, ...) with `micro`
// rows per micro-batch, `accumulation` micro-batches per step and `dp`
// data-parallel ranks; the mean loss of each step on this rank.
inline std::vector<double> TrainSteps(Engine& engine, Gpt& model, int steps, int64_t micro, int64_t accumulation,
                                      int dp, int rank, int first_step = 0) {
  std::vector<double> losses;
  for (int step = first_step; step < first_step + steps; ++step) {
    double step_loss = 0;
    for (int64_t m = 0; m < accumulation; ++m) {
      const int64_t first = step * micro * accumulation * dp + m * micro * dp + rank * micro;
      auto [inputs, targets] = Batch(first, micro);
      torch::Tensor loss = model->Loss(inputs, targets);
      step_loss += loss.item<double>() / accumulation;
      EXPECT_TRUE(engine.Backward(loss).ok());
      EXPECT_TRUE(engine.Step().ok());
    }
    losses.push_back(step_loss);
  }
  return losses;
}

}  // namespace dslaunch::runtime::testing

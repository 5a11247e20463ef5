// Test support for the expert-parallel parity harness (Note [Mixture of
// experts]): ranks on threads with their process groups at an expert-
// parallel size, and what a rank's backward left, in a form that compares
// across expert-parallel sizes.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/moe/moe_layer.h"
#include "runtime/parallel/parallel_state.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime::testing {

// Runs body(rank, state) on `world` threads whose ParallelState has expert
// size `ep` (data-parallel over the world otherwise); `attempt` must be new
// for `store`.
inline void RunExpertParallelRanks(InProcessStore& store, int attempt, int world, int ep,
                                   const std::function<void(int, const ParallelState&)>& body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      StoreClient client = store.Client(attempt);
      auto state = ParallelState::Create(
          world, rank, ParallelSizes{.expert = ep},
          [&client](const GroupSpec& spec) { return CreateCommunicator(CommBackend::kGloo, client, spec); }, nullptr);
      ASSERT_TRUE(state.ok()) << state.status();
      body(rank, **state);
    });
  }
  for (auto& thread : threads) thread.join();
}

inline ExpertParallelGroup ExpertGroupOf(const ParallelState& state) {
  Communicator* comm = state.expert();
  return comm == nullptr ? ExpertParallelGroup{} : ExpertParallelGroup{comm, comm->rank(), comm->size()};
}

// What one rank's backward left.
struct BackwardResult {
  double loss = 0;
  // Parameters outside the experts, and anything else the test adds, by name.
  std::map<std::string, torch::Tensor> dense;
  // Expert parameters by name with the expert index taken out
  // ("blocks.1.moe.experts.*.fc.weight"): an [E, ...] tensor holding each
  // expert's gradient summed over every rank that holds it (its expert-data-
  // parallel group; all ranks at ep 1). A collective over `world`.
  std::map<std::string, torch::Tensor> expert_sums;
};

inline void CollectGradients(const torch::nn::Module& module, int64_t num_experts, Communicator* world,
                             BackwardResult* result) {
  for (const auto& item : module.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    torch::Tensor grad = item.value().grad().defined() ? item.value().grad() : torch::zeros_like(item.value());
    const int64_t e = ExpertIndexOf(item.key());
    if (e < 0) {
      result->dense[item.key()] = grad.to(torch::kFloat).clone();
      continue;
    }
    const std::string name = ExpertNameForm(item.key());
    std::vector<int64_t> shape = {num_experts};
    for (int64_t d : item.value().sizes()) shape.push_back(d);
    torch::Tensor& sum = result->expert_sums[name];
    if (!sum.defined()) sum = torch::zeros(shape);
    sum[e].copy_(grad.to(torch::kFloat));
  }
  for (auto& [name, sum] : result->expert_sums) {
    ASSERT_TRUE(world->AllReduce(sum, ReduceOp::kSum).ok());
  }
}

// Mismatches of `got` against `want` over all ranks, as text: relative to
// each reference tensor's largest magnitude, above `tolerance`.
inline std::vector<std::string> CompareBackward(const std::vector<BackwardResult>& got,
                                                const std::vector<BackwardResult>& want, double tolerance) {
  std::vector<std::string> bad;
  auto check = [&](const std::string& what, const torch::Tensor& g, const torch::Tensor& w) {
    if (!g.defined() || !w.defined() || g.sizes() != w.sizes()) {
      bad.push_back(what + ": missing or of another shape");
      return;
    }
    const double scale = std::max(w.abs().max().item<double>(), 1e-12);
    const double error = (g - w).abs().max().item<double>() / scale;
    if (!(error <= tolerance)) bad.push_back(absl::StrCat(what, ": relative error ", error));
  };
  auto find = [](const std::map<std::string, torch::Tensor>& m, const std::string& name) {
    auto it = m.find(name);
    return it == m.end() ? torch::Tensor() : it->second;
  };
  for (size_t rank = 0; rank < want.size(); ++rank) {
    if (!(std::abs(got[rank].loss - want[rank].loss) <= tolerance * std::max(1.0, std::abs(want[rank].loss)))) {
      bad.push_back(absl::StrCat("rank ", rank, " loss ", got[rank].loss, " against ", want[rank].loss));
    }
    for (const auto& [name, w] : want[rank].dense)
      check(absl::StrCat("rank ", rank, " ", name), find(got[rank].dense, name), w);
    for (const auto& [name, w] : want[rank].expert_sums) {
      check(absl::StrCat("rank ", rank, " ", name), find(got[rank].expert_sums, name), w);
    }
  }
  return bad;
}

}  // namespace dslaunch::runtime::testing

// Test support: expert × data-parallel training of a small GPT-MoE and a
// Mixtral-style Llama on Gloo threads (Note [Mixture of experts]): the
// layout, its engine config, the model over this rank's expert group,
// training steps on each data-parallel rank's rows, and the parameters by
// name (each rank its own experts).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "runtime/engine/engine.h"
#include "runtime/model/gpt.h"
#include "runtime/model/llama.h"
#include "runtime/model/lora.h"
#include "runtime/testing/expert_parallel_harness.h"

namespace dslaunch::runtime::testing {

inline constexpr int64_t kMoeRowsPerRank = 2;
inline constexpr int64_t kMoeExperts = 4;

struct ExpertLayout {
  std::string family = "gpt";  // gpt: top-1, capacity-bound; llama: top-2, dropless
  int world = 4, ep = 1, stage = 2;
  int gas = 1;
  bool bf16 = false;
  std::string offload = "none";  // offload_optimizer.device: none, cpu or nvme
  std::string nvme_path;         // with nvme: a folder on a real file system (not tmpfs)
  // llama only: LoRA (r 4, alpha 8) on these targets, everything else frozen.
  std::vector<std::string> lora;

  std::string Describe() const {
    return absl::StrCat(family, " EP ", ep, " x DP ", world, " ZeRO ", stage, " gas ", gas, bf16 ? " bf16" : "",
                        offload != "none" ? absl::StrCat(" offload ", offload) : std::string(),
                        lora.empty() ? std::string() : absl::StrCat(" LoRA ", absl::StrJoin(lora, ",")));
  }
};

inline DsConfig ExpertConfig(const ExpertLayout& layout) {
  DsConfig config;
  config.zero_optimization.stage = layout.stage;
  config.train_micro_batch_size_per_gpu = kMoeRowsPerRank;
  config.gradient_accumulation_steps = layout.gas;
  config.train_batch_size = kMoeRowsPerRank * layout.gas * layout.world;
  config.optimizer.type = "AdamW";
  config.optimizer.lr = 1e-2;
  config.optimizer.weight_decay = 0.01;
  config.gradient_clipping = 0.5;  // the norm over both partitions is part of what is checked
  config.zero_optimization.reduce_bucket_size = 500;
  config.bf16.enabled = layout.bf16;
  config.zero_optimization.offload_optimizer.device = layout.offload;
  if (layout.offload == "nvme") {
    config.zero_optimization.offload_optimizer.nvme_path = layout.nvme_path;
    config.zero_optimization.sub_group_size = 1000;  // several sub-groups per partition
    config.aio.block_size = 8192;
    config.aio.queue_depth = 4;
  }
  return config;
}

inline std::shared_ptr<torch::nn::Module> BuildMoeModel(const ExpertLayout& layout, const ExpertParallelGroup& group,
                                                        ModelInterface** family) {
  MoeOptions moe;
  // No random draws: the ranks are threads sharing LibTorch's generator.
  moe.gating = GatingOptions{.num_experts = kMoeExperts,
                             .top_k = layout.family == "gpt" ? 1 : 2,
                             .capacity_factor = 1.0,
                             .min_capacity = 1,
                             .drop_tokens = layout.family == "gpt",
                             .use_rts = false,
                             .second_expert_sampling = false};
  moe.aux_loss_coef = 0.01;
  moe.expert_parallel = group;
  if (layout.family == "gpt") {
    GptOptions options = TinyGpt();
    options.layers = 2;
    options.moe = moe;
    options.moe.every = 2;  // block 1 only
    auto model = std::make_shared<GptImpl>(options, 3);
    *family = model.get();
    return model;
  }
  LlamaOptions options = TinyLlama();
  options.moe = moe;
  auto model = std::make_shared<LlamaImpl>(options, 3);
  if (!layout.lora.empty()) {
    LoraSettings settings;
    settings.adapter.r = 4;
    settings.adapter.alpha = 8;
    settings.target_modules = layout.lora;
    absl::StatusOr<LoraSummary> applied = ApplyLora(*model, settings, 5);
    EXPECT_TRUE(applied.ok()) << applied.status();
  }
  *family = model.get();
  return model;
}

struct ExpertRank {
  ModelInterface* family = nullptr;
  std::shared_ptr<torch::nn::Module> module;
  std::unique_ptr<Engine> engine;  // null when Engine::Create failed (the test has failed)
};

// `state` must outlive the result (the engine borrows it).
inline ExpertRank StartExpertRank(const ExpertLayout& layout, const ParallelState& state) {
  ExpertRank rank;
  rank.module = BuildMoeModel(layout, ExpertGroupOf(state), &rank.family);
  std::shared_ptr<const ParallelState> borrowed(&state, [](const ParallelState*) {});
  auto engine = Engine::Create(rank.module, ExpertConfig(layout), borrowed, torch::kCPU);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (engine.ok()) rank.engine = std::move(*engine);
  return rank;
}

// Optimizer steps [first, first + steps), each of `gas` micro-batches of this
// data-parallel rank's rows; appends the loss of each micro-batch (and, when
// asked, each step's gradient norm before clipping).
inline void TrainExpertSteps(ExpertRank& rank, const ExpertLayout& layout, const ParallelState& state, int first,
                             int steps, std::vector<double>* losses, std::vector<double>* grad_norms = nullptr) {
  const int data_rank = state.data() ? state.data()->rank() : 0;
  for (int step = first; step < first + steps; ++step) {
    for (int micro = 0; micro < layout.gas; ++micro) {
      const int64_t row = ((step * layout.gas + micro) * layout.world + data_rank) * kMoeRowsPerRank;
      auto [inputs, targets] = Batch(row, kMoeRowsPerRank);
      torch::Tensor loss = rank.family->Loss(inputs, targets);
      losses->push_back(loss.item<double>());
      ASSERT_TRUE(rank.engine->Backward(loss).ok());
      auto stepped = rank.engine->Step();
      ASSERT_TRUE(stepped.ok()) << stepped.status();
      EXPECT_EQ(stepped->stepped, micro + 1 == layout.gas);
      if (grad_norms != nullptr && stepped->boundary) grad_norms->push_back(stepped->grad_norm);
    }
  }
}

// This rank's parameters by name (fp32 copies): the dense ones and its experts.
inline std::map<std::string, torch::Tensor> NamedParameters(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> named;
  for (const auto& item : module.named_parameters())
    named[item.key()] = item.value().detach().to(torch::kFloat).clone();
  return named;
}

// Mismatches, as text: every parameter `got` holds against the same name in
// `want` (relative to its largest magnitude, above `tolerance`).
inline std::vector<std::string> CompareNamed(const std::map<std::string, torch::Tensor>& got,
                                             const std::map<std::string, torch::Tensor>& want, double tolerance) {
  std::vector<std::string> bad;
  for (const auto& [name, value] : got) {
    auto it = want.find(name);
    if (it == want.end()) {
      bad.push_back(name + ": not in the reference");
      continue;
    }
    const double scale = std::max(it->second.abs().max().item<double>(), 1e-12);
    const double error = (value - it->second).abs().max().item<double>() / scale;
    if (!(error <= tolerance)) bad.push_back(absl::StrCat(name, ": relative error ", error));
  }
  return bad;
}

}  // namespace dslaunch::runtime::testing

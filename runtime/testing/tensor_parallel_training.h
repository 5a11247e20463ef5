// Test support: tensor × data-parallel training of the small GPT and Llama
// on Gloo threads (Note [Tensor parallelism]): the job's layout, its engine
// config, the model split over this rank's tensor group, training steps on
// each data-parallel replica's rows, and the parameters gathered whole.
#pragma once

#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/engine/engine.h"
#include "runtime/model/deferred_parameters.h"
#include "runtime/model/gpt.h"
#include "runtime/model/llama.h"
#include "runtime/model/lora.h"
#include "runtime/model/seeded_parameter_source.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime::testing {

inline constexpr int64_t kTensorParallelRowsPerStep = 8;

struct TensorParallelLayout {
  std::string family = "gpt";  // gpt | llama (8 query heads, 2 key/value heads)
  int tp = 1, dp = 1, stage = 0;
  bool sequence_parallel = false;
  bool bf16 = false;
  bool lora = false;     // Llama: adapters on every projection (all-linear, r 4), the rest frozen
  bool offload = false;  // the optimizer's state and step on the host (offload_optimizer: cpu)
  bool offload_param = false;  // stage 3: the parameter shards on the host (offload_param: cpu)
  // Stage 3: the model built deferred (Note [Shard-only loading]), the
  // engine reading this rank's pieces: the GPT's (and with `seeded` the
  // Llama's) drawn from the seed (SeededParameterSource), else the Llama's
  // from an unsplit model of the same seed, as from a folder.
  bool deferred = false;
  bool seeded = false;
  // stage3_param_persistence_threshold: units below it stay gathered.
  int64_t persistence_threshold = 0;

  int world() const { return tp * dp; }
  std::string Describe() const {
    return absl::StrCat(family, " TP ", tp, " x DP ", dp, " ZeRO ", stage, sequence_parallel ? " sequence parallel" : "",
                        bf16 ? " bf16" : "", lora ? " LoRA" : "", offload ? " optimizer offload" : "",
                        offload_param ? " parameter offload" : "",
                        deferred ? (family == "gpt" || seeded ? " drawn where kept" : " shard-only load") : "",
                        persistence_threshold > 0 ? absl::StrCat(" persistent below ", persistence_threshold) : "");
  }
};

inline DsConfig TensorParallelConfig(const TensorParallelLayout& layout) {
  DsConfig config;
  config.zero_optimization.stage = layout.stage;
  config.train_micro_batch_size_per_gpu = kTensorParallelRowsPerStep / layout.dp;
  config.gradient_accumulation_steps = 1;
  config.train_batch_size = kTensorParallelRowsPerStep;
  config.optimizer.type = "AdamW";
  config.optimizer.lr = 1e-2;
  config.optimizer.weight_decay = 0.01;
  config.gradient_clipping = 0.5;  // the norm over the tensor group is part of what is checked
  config.zero_optimization.reduce_bucket_size = 1000;
  config.zero_optimization.stage3_param_persistence_threshold = layout.persistence_threshold;
  config.bf16.enabled = layout.bf16;
  if (layout.offload) config.zero_optimization.offload_optimizer.device = "cpu";
  if (layout.offload_param) config.zero_optimization.offload_param.device = "cpu";
  // The adapters' gradients are small: clip every step, so the norm is read.
  if (layout.lora) config.gradient_clipping = 1e-3;
  return config;
}

// The parallel tests' LoRA: adapters on every projection (all-linear, r 4,
// alpha 8, seed 5), the rest frozen.
inline void ApplyTestLora(torch::nn::Module& model) {
  LoraSettings lora;
  lora.adapter.r = 4;
  lora.adapter.alpha = 8;
  lora.target_modules = {"all-linear"};
  auto applied = ApplyLora(model, lora, /*seed=*/5);
  EXPECT_TRUE(applied.ok()) << applied.status();
}

// The tests' Llama: 8 query heads, 2 key/value heads.
inline LlamaOptions TestLlamaOptions() {
  LlamaOptions options;
  options.layers = 2;
  options.hidden = 32;
  options.heads = 8;
  options.kv_heads = 2;
  options.head_dim = 4;
  options.intermediate = 48;
  options.vocab_size = 37;
  return options;
}

// The model of `layout` split over `group` (the same weights for every split).
// With layout.deferred and a seeded source, `seeded` receives it (made
// before LoRA adds its adapters).
inline std::shared_ptr<torch::nn::Module> BuildTensorParallelModel(
    const TensorParallelLayout& layout, const TensorParallelGroup& group, ModelInterface** family,
    std::shared_ptr<SeededParameterSource>* seeded = nullptr) {
  auto seed_source = [&](torch::nn::Module& module, ModelInterface& model) {
    if (layout.deferred && seeded != nullptr && (layout.family == "gpt" || layout.seeded)) {
      *seeded = std::make_shared<SeededParameterSource>(module, model.TensorParallelForms(), group, model.InitialValues(3));
    }
  };
  if (layout.family == "gpt") {
    GptOptions options = TinyGpt();
    options.heads = 4;
    options.width = 32;
    options.vocab_size = 37;
    options.tensor_parallel = group;
    options.deferred = layout.deferred;
    auto model = std::make_shared<GptImpl>(options, 3);
    seed_source(*model, *model);
    *family = model.get();
    return model;
  }
  LlamaOptions options = TestLlamaOptions();
  options.tensor_parallel = group;
  options.deferred = layout.deferred;
  auto model = std::make_shared<LlamaImpl>(options, 3);
  seed_source(*model, *model);
  if (layout.lora) ApplyTestLora(*model);
  *family = model.get();
  return model;
}

// Note [Shard-only loading] in tests: a deferred model's values from the
// unsplit Llama of the same seed (this rank's tensor-parallel slices of
// it), counting the elements read.
class WholeModelSource : public ParameterSource {
 public:
  WholeModelSource(const std::vector<TensorParallelForm>& forms, const TensorParallelGroup& group)
      : whole_(std::make_shared<LlamaImpl>(TestLlamaOptions(), 3)), group_(group) {
    for (const TensorParallelForm& form : forms) forms_[form.parameter] = form;
  }
  absl::Status Read(const std::string& name, int64_t offset, torch::Tensor out) const override {
    auto parameters = whole_->named_parameters();
    const torch::Tensor* found = parameters.find(name);
    if (found == nullptr) return absl::NotFoundError(absl::StrCat("no parameter '", name, "'"));
    torch::Tensor value = *found;
    if (auto it = forms_.find(name); it != forms_.end()) {
      auto slice = SliceForRank(value, it->second, group_.rank, group_.size);
      if (!slice.ok()) return slice.status();
      value = *slice;
    }
    if (offset < 0 || offset + out.numel() > value.numel()) {
      return absl::OutOfRangeError(absl::StrCat(name, ": [", offset, ", +", out.numel(), ") of ", value.numel()));
    }
    torch::NoGradGuard no_grad;
    out.copy_(value.reshape({-1}).narrow(0, offset, out.numel()));
    elements_read_ += out.numel();
    return absl::OkStatus();
  }
  int64_t elements_read() const { return elements_read_; }

 private:
  std::shared_ptr<LlamaImpl> whole_;
  TensorParallelGroup group_;
  std::map<std::string, TensorParallelForm> forms_;
  mutable int64_t elements_read_ = 0;
};

inline TensorParallelGroup TensorGroupOf(const ParallelState& state, bool sequence_parallel) {
  Communicator* tensor = state.tensor();
  // As dsrank's: input gradients reduced on a worker of the group's own
  // (Note [Overlapped input-gradient reduction]).
  return TensorParallelGroup{tensor, tensor ? tensor->rank() : 0, tensor ? tensor->size() : 1, sequence_parallel,
                             tensor ? std::make_shared<CommWorker>(torch::kCPU) : nullptr};
}

// One rank's model (split over its tensor group) and engine.
struct TensorParallelRank {
  TensorParallelGroup group;
  ModelInterface* family = nullptr;
  std::shared_ptr<torch::nn::Module> module;
  std::unique_ptr<Engine> engine;  // null when Engine::Create failed (the test has failed)
  std::shared_ptr<WholeModelSource> source;  // layout.deferred, Llama: what the engine read from
  std::shared_ptr<SeededParameterSource> seeded;  // layout.deferred, GPT (or layout.seeded)
};

// `state` must outlive the result (the engine borrows it).
inline TensorParallelRank StartTensorParallelRank(const TensorParallelLayout& layout, const ParallelState& state) {
  TensorParallelRank rank;
  rank.group = TensorGroupOf(state, layout.sequence_parallel);
  rank.module = BuildTensorParallelModel(layout, rank.group, &rank.family, &rank.seeded);
  std::shared_ptr<const ParallelState> borrowed(&state, [](const ParallelState*) {});
  if (layout.deferred && rank.seeded == nullptr) {
    rank.source = std::make_shared<WholeModelSource>(rank.family->TensorParallelForms(), rank.group);
  }
  const ParameterSource* values =
      rank.seeded ? static_cast<const ParameterSource*>(rank.seeded.get()) : rank.source.get();
  auto engine = Engine::Create(rank.module, TensorParallelConfig(layout), borrowed, torch::kCPU, std::nullopt, values);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (engine.ok()) rank.engine = std::move(*engine);
  return rank;
}

// Runs body(rank, state) for every rank of `layout` on threads (one process
// without threads when the world is 1).
inline void RunTensorParallelRanks(const TensorParallelLayout& layout,
                                   const std::function<void(int, const ParallelState&)>& body) {
  if (layout.world() == 1) {
    body(0, *ParallelState::DataParallelOnly(nullptr));
    return;
  }
  InProcessStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < layout.world(); ++rank) {
    threads.emplace_back([&, rank] {
      StoreClient client = store.Client(0);
      auto state = ParallelState::Create(
          layout.world(), rank, ParallelSizes{.tensor = layout.tp},
          [&client](const GroupSpec& spec) { return CreateCommunicator(CommBackend::kGloo, client, spec); }, nullptr);
      ASSERT_TRUE(state.ok()) << state.status();
      body(rank, **state);
    });
  }
  for (auto& thread : threads) thread.join();
}

// Steps [first, first + steps) on this replica's rows of each global batch;
// appends this rank's loss of each.
inline void TrainTensorParallelSteps(Engine& engine, ModelInterface& model, const TensorParallelLayout& layout,
                                     const ParallelState& state, int first, int steps, std::vector<double>* losses) {
  const int data_rank = state.data() ? state.data()->rank() : 0;
  const int64_t rows = kTensorParallelRowsPerStep / layout.dp;
  for (int step = first; step < first + steps; ++step) {
    auto [inputs, targets] = Batch(step * kTensorParallelRowsPerStep + data_rank * rows, rows);
    torch::Tensor loss = model.Loss(inputs, targets);
    losses->push_back(loss.item<double>());
    ASSERT_TRUE(engine.Backward(loss).ok());
    auto stepped = engine.Step();
    ASSERT_TRUE(stepped.ok()) << stepped.status();
    EXPECT_TRUE(stepped->stepped);
  }
}

// Every parameter whole (fp32), on every rank: a collective over the tensor
// group (and with ZeRO-3 the data group).
inline std::map<std::string, torch::Tensor> WholeParameters(Engine& engine, torch::nn::Module& module,
                                                            ModelInterface& model, const TensorParallelGroup& group) {
  EXPECT_TRUE(engine.GatherFullParameters().ok());
  std::map<std::string, TensorParallelForm> forms;
  for (const TensorParallelForm& form : model.TensorParallelForms()) forms[form.parameter] = form;
  std::map<std::string, torch::Tensor> whole;
  for (const auto& item : module.named_parameters()) {
    torch::Tensor value = item.value().detach().to(torch::kFloat);
    if (auto it = forms.find(item.key()); it != forms.end()) {
      auto gathered = GatherWhole(value, it->second, group);
      EXPECT_TRUE(gathered.ok()) << gathered.status();
      if (gathered.ok()) value = *gathered;
    }
    whole[item.key()] = value.clone();
  }
  return whole;
}

// The step losses of a run: each step's mean over the data-parallel
// replicas (the ranks of a tensor group compute the same loss).
inline std::vector<double> MeanLosses(const std::vector<std::vector<double>>& per_rank) {
  std::vector<double> mean;
  for (size_t step = 0; !per_rank.empty() && step < per_rank[0].size(); ++step) {
    double sum = 0;
    for (const auto& losses : per_rank) sum += step < losses.size() ? losses[step] : 0;
    mean.push_back(sum / static_cast<double>(per_rank.size()));
  }
  return mean;
}

// Trains `layout` and one process (TP 1, DP 1, ZeRO 0, nothing offloaded)
// for `steps` steps and expects the same losses and, after the steps, the
// same whole parameters. Tolerances: fp32 losses 1e-5 relative, parameters
// 1e-4 absolute after five AdamW steps at lr 1e-2 (the split sums differ in
// their last bits, and Adam's update divides by √v, which magnifies a
// difference where v is small); bf16 2e-2 and 6e-2.
inline void ExpectSameTrainingAsOneProcess(const TensorParallelLayout& layout, int steps = 5) {
  struct Outcome {
    std::vector<double> losses;                   // the global mean of each step
    std::map<std::string, torch::Tensor> params;  // whole, fp32, after the steps
  };
  auto train = [steps](const TensorParallelLayout& l) {
    std::vector<std::vector<double>> losses(l.world());
    std::vector<std::map<std::string, torch::Tensor>> params(l.world());
    RunTensorParallelRanks(l, [&](int rank, const ParallelState& state) {
      TensorParallelRank r = StartTensorParallelRank(l, state);
      ASSERT_NE(r.engine, nullptr);
      TrainTensorParallelSteps(*r.engine, *r.family, l, state, 0, steps, &losses[rank]);
      params[rank] = WholeParameters(*r.engine, *r.module, *r.family, r.group);
    });
    return Outcome{MeanLosses(losses), params[0]};
  };
  TensorParallelLayout one = layout;
  one.tp = one.dp = 1;
  one.sequence_parallel = false;
  one.stage = 0;
  one.offload = one.offload_param = one.deferred = one.seeded = false;
  const Outcome want = train(one);
  const Outcome got = train(layout);
  const double loss_tolerance = layout.bf16 ? 2e-2 : 1e-5;
  const double param_tolerance = layout.bf16 ? 6e-2 : 1e-4;
  ASSERT_EQ(got.losses.size(), want.losses.size()) << layout.Describe();
  for (size_t step = 0; step < want.losses.size(); ++step) {
    EXPECT_NEAR(got.losses[step], want.losses[step], loss_tolerance * want.losses[step])
        << layout.Describe() << ", step " << step;
  }
  ASSERT_EQ(got.params.size(), want.params.size()) << layout.Describe();
  double worst = 0;
  for (const auto& [name, value] : want.params) {
    const double error = (got.params.at(name) - value).abs().max().item<double>();
    worst = std::max(worst, error);
    EXPECT_LE(error, param_tolerance) << layout.Describe() << ": " << name;
  }
  std::cout << layout.Describe() << ": worst parameter difference " << worst << "\n";
}

}  // namespace dslaunch::runtime::testing

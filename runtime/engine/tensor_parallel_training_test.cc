// Training with tensor × data parallelism (Note [Tensor parallelism]): gpt
// and Llama at world 4 (TP 2 × DP 2) and 8 (TP 4 × DP 2, TP 2 × DP 4) with
// ZeRO 0-3, sequence parallelism on and off, match one process step for
// step: the same losses and, after the steps, the same parameters. The
// gradient norm is clipped (gradient_clipping 0.5), so a norm that counted a
// replicated parameter twice or missed another rank's slices would show.
//
// Tolerances: fp32 losses 1e-5 relative, parameters 1e-4 absolute after
// five AdamW steps at lr 1e-2 (the split sums differ in their last bits, and
// Adam's update divides by √v, which magnifies a difference where v is small).
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/engine/engine.h"
#include "runtime/model/gpt.h"
#include "runtime/model/llama.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime {
namespace {

using testing::Batch;
using testing::InProcessStore;

constexpr int kSteps = 5;
constexpr int64_t kRowsPerStep = 8;

struct Layout {
  std::string family = "gpt";
  int tp = 1, dp = 1, stage = 0;
  bool sequence_parallel = false;
  bool bf16 = false;

  std::string Describe() const {
    return absl::StrCat(family, " TP ", tp, " x DP ", dp, " ZeRO ", stage, sequence_parallel ? " sequence parallel" : "",
                        bf16 ? " bf16" : "");
  }
};

struct Outcome {
  std::vector<double> losses;                   // the global mean of each step
  std::map<std::string, torch::Tensor> params;  // whole, fp32, after the steps
};

DsConfig Config(const Layout& s) {
  DsConfig config;
  config.zero_optimization.stage = s.stage;
  config.train_micro_batch_size_per_gpu = kRowsPerStep / s.dp;
  config.gradient_accumulation_steps = 1;
  config.train_batch_size = kRowsPerStep;
  config.optimizer.type = "AdamW";
  config.optimizer.lr = 1e-2;
  config.optimizer.weight_decay = 0.01;
  config.gradient_clipping = 0.5;
  config.zero_optimization.reduce_bucket_size = 1000;
  config.zero_optimization.stage3_param_persistence_threshold = 0;
  config.bf16.enabled = s.bf16;
  return config;
}

std::shared_ptr<torch::nn::Module> Build(const Layout& s, const TensorParallelGroup& group, ModelInterface** family) {
  if (s.family == "gpt") {
    GptOptions options = testing::TinyGpt();
    options.heads = 4;
    options.width = 32;
    options.vocab_size = 37;
    options.tensor_parallel = group;
    auto model = std::make_shared<GptImpl>(options, 3);
    *family = model.get();
    return model;
  }
  LlamaOptions options;
  options.layers = 2;
  options.hidden = 32;
  options.heads = 8;
  options.kv_heads = 2;
  options.head_dim = 4;
  options.intermediate = 48;
  options.vocab_size = 37;
  options.tensor_parallel = group;
  auto model = std::make_shared<LlamaImpl>(options, 3);
  *family = model.get();
  return model;
}

// One rank's part of the run; `losses` of this rank's rows per step.
void TrainRank(const Layout& s, const ParallelState& state, std::vector<double>* losses,
               std::map<std::string, torch::Tensor>* params) {
  const int tensor_rank = state.tensor() ? state.tensor()->rank() : 0;
  const int data_rank = state.data() ? state.data()->rank() : 0;
  const TensorParallelGroup group{state.tensor(), tensor_rank, s.tp, s.sequence_parallel};
  ModelInterface* family = nullptr;
  std::shared_ptr<torch::nn::Module> module = Build(s, group, &family);
  std::shared_ptr<const ParallelState> borrowed(&state, [](const ParallelState*) {});
  auto engine = Engine::Create(module, Config(s), borrowed, torch::kCPU);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const int64_t rows = kRowsPerStep / s.dp;
  for (int step = 0; step < kSteps; ++step) {
    auto [inputs, targets] = Batch(step * kRowsPerStep + data_rank * rows, rows);
    torch::Tensor loss = family->Loss(inputs, targets);
    losses->push_back(loss.item<double>());
    ASSERT_TRUE((*engine)->Backward(loss).ok());
    auto stepped = (*engine)->Step();
    ASSERT_TRUE(stepped.ok()) << stepped.status();
    EXPECT_TRUE(stepped->stepped);
  }
  ASSERT_TRUE((*engine)->GatherFullParameters().ok());
  std::map<std::string, TensorParallelForm> forms;
  for (const TensorParallelForm& form : family->TensorParallelForms()) forms[form.parameter] = form;
  for (const auto& item : module->named_parameters()) {
    torch::Tensor value = item.value().detach().to(torch::kFloat);
    if (auto it = forms.find(item.key()); it != forms.end()) {
      auto whole = GatherWhole(value, it->second, group);
      ASSERT_TRUE(whole.ok()) << whole.status();
      value = *whole;
    }
    (*params)[item.key()] = value.clone();
  }
}

Outcome Train(const Layout& s) {
  const int world = s.tp * s.dp;
  std::vector<std::vector<double>> losses(world);
  std::vector<std::map<std::string, torch::Tensor>> params(world);
  if (world == 1) {
    TrainRank(s, *ParallelState::DataParallelOnly(nullptr), &losses[0], &params[0]);
  } else {
    InProcessStore store;
    std::vector<std::thread> threads;
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back([&, rank] {
        StoreClient client = store.Client(0);
        auto state = ParallelState::Create(
            world, rank, ParallelSizes{.tensor = s.tp},
            [&client](const GroupSpec& spec) { return CreateCommunicator(CommBackend::kGloo, client, spec); },
            nullptr);
        ASSERT_TRUE(state.ok()) << state.status();
        TrainRank(s, **state, &losses[rank], &params[rank]);
      });
    }
    for (auto& thread : threads) thread.join();
  }
  Outcome outcome;
  outcome.params = params[0];
  // The ranks of a tensor group compute the same loss; the step's loss is the
  // mean over the data-parallel replicas (equal row counts).
  for (int step = 0; step < kSteps; ++step) {
    double sum = 0;
    for (int rank = 0; rank < world; ++rank) sum += losses[rank].size() > static_cast<size_t>(step) ? losses[rank][step] : 0;
    outcome.losses.push_back(sum / world);
  }
  return outcome;
}

void ExpectSameTraining(const Layout& s) {
  Layout one = s;
  one.tp = one.dp = 1;
  one.sequence_parallel = false;
  one.stage = 0;
  const Outcome want = Train(one);
  const Outcome got = Train(s);
  const double loss_tolerance = s.bf16 ? 2e-2 : 1e-5;
  const double param_tolerance = s.bf16 ? 6e-2 : 1e-4;
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_NEAR(got.losses[step], want.losses[step], loss_tolerance * want.losses[step])
        << s.Describe() << ", step " << step;
  }
  ASSERT_EQ(got.params.size(), want.params.size()) << s.Describe();
  double worst = 0;
  for (const auto& [name, value] : want.params) {
    const double error = (got.params.at(name) - value).abs().max().item<double>();
    worst = std::max(worst, error);
    EXPECT_LE(error, param_tolerance) << s.Describe() << ": " << name;
  }
  std::cout << s.Describe() << ": worst parameter difference " << worst << "\n";
}

TEST(TensorParallelTrainingTest, GptAtTpTwoByDpTwoMatchesOneProcessAtEveryZeroStage) {
  for (int stage : {0, 1, 2, 3}) ExpectSameTraining(Layout{"gpt", 2, 2, stage});
}

TEST(TensorParallelTrainingTest, LlamaWithSequenceParallelismMatchesOneProcess) {
  ExpectSameTraining(Layout{"llama", 2, 2, 2, /*sequence_parallel=*/true});
  ExpectSameTraining(Layout{"llama", 2, 2, 1, /*sequence_parallel=*/false, /*bf16=*/true});
}

TEST(TensorParallelTrainingTest, WorldEightAsTpFourByDpTwoAndTpTwoByDpFourMatchesOneProcess) {
  ExpectSameTraining(Layout{"llama", 4, 2, 3});
  ExpectSameTraining(Layout{"gpt", 2, 4, 1, /*sequence_parallel=*/true});
}

}  // namespace
}  // namespace dslaunch::runtime

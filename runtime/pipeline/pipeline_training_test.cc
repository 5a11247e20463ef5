// Pipeline parallelism (Note [Pipeline stages]) matches one process: gpt and
// Llama at PP 2 and 4 with 1F1B, interleaved and GPipe schedules, PP × DP
// with ZeRO-1 and ZeRO-2 (and CPU offload), and PP × TP × DP, on Gloo
// threads. Each step's loss (the mean over the micro-batches, which every
// stage reports) and every parameter after the steps equal a world-1
// engine's with gradient_accumulation_steps = M on the same rows. The
// gradient is clipped (gradient_clipping 0.5), so a norm that missed a stage
// or counted a tied copy twice would show; the GPT's embedding is tied to
// its head across the first and last stage, so a missed tied-gradient sum
// shows too (BrokenTiedSumIsCaught).
//
// Tolerances: fp32 losses 1e-5 relative, parameters 1e-4 absolute after
// four AdamW steps at lr 1e-2 (sums in another order; Adam's division by √v
// magnifies last-bit differences where v is small); bf16 2e-2 and 6e-2.
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/consolidate.h"
#include "runtime/checkpoint/engine_checkpointer.h"
#include "runtime/hf/safetensors_reader.h"
#include "runtime/engine/engine.h"
#include "runtime/model/gpt.h"
#include "runtime/model/llama.h"
#include "runtime/pipeline/pipeline_engine.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"
#include "runtime/testing/rank_group.h"
#include "runtime/testing/tensor_parallel_training.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {
namespace {

constexpr int kSteps = 4;
constexpr int64_t kRowsPerStep = 16;

struct PipeLayout {
  std::string family = "gpt";  // gpt (6 blocks, tied head) | llama (4 layers, untied)
  int pp = 2, tp = 1, dp = 1;
  int zero = 0;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  int micro_batches = 4;
  bool offload = false;
  bool bf16 = false;
  bool sequence_parallel = false;
  std::string partition = "parameters";
  int checkpoint_interval = 0;  // pipeline.activation_checkpoint_interval
  bool lora = false;  // llama: adapters on every projection (all-linear, r 4), the rest frozen
  int64_t llama_vocab = 37;
  int layers_per_virtual_stage = 0;  // pipeline.num_layers_per_virtual_stage
  // Note [Experts in pipeline stages]: gpt's blocks 1, 3, 5 or every Llama
  // layer a mixture of 4 experts (top 2, dropless), auxiliary and z losses
  // weighted enough to move the loss and the gradient.
  bool moe = false;

  int world() const { return pp * tp * dp; }
  std::string Describe() const {
    return absl::StrCat(family, " PP ", pp, " (", schedule, virtual_stages > 1 ? absl::StrCat(" v", virtual_stages) : "",
                        ", M ", micro_batches, ") x TP ", tp, sequence_parallel ? " SP" : "", " x DP ", dp, " ZeRO ",
                        zero, offload ? " offload" : "", bf16 ? " bf16" : "",
                        checkpoint_interval > 0 ? absl::StrCat(" recompute every ", checkpoint_interval) : "",
                        lora ? " LoRA" : "",
                        layers_per_virtual_stage > 0 ? absl::StrCat(" ", layers_per_virtual_stage, " blocks per chunk") : "",
                        moe ? " MoE" : "");
  }
};

DsConfig PipeConfig(const PipeLayout& layout) {
  DsConfig config;
  config.zero_optimization.stage = layout.zero;
  config.gradient_accumulation_steps = layout.micro_batches;
  config.train_micro_batch_size_per_gpu = kRowsPerStep / (layout.dp * layout.micro_batches);
  config.train_batch_size = kRowsPerStep;
  config.optimizer.type = "AdamW";
  config.optimizer.lr = 1e-2;
  config.optimizer.weight_decay = 0.01;
  config.gradient_clipping = 0.5;
  config.zero_optimization.reduce_bucket_size = 1000;
  if (layout.offload) config.zero_optimization.offload_optimizer.device = "cpu";
  config.bf16.enabled = layout.bf16;
  config.pipeline.stages = layout.pp;
  config.pipeline.schedule = layout.schedule;
  config.pipeline.virtual_stages = layout.virtual_stages;
  config.pipeline.num_layers_per_virtual_stage = layout.layers_per_virtual_stage;
  config.pipeline.partition_method = layout.partition;
  config.pipeline.activation_checkpoint_interval = layout.checkpoint_interval;
  // The adapters' gradients are small: clip every step, so the norm is read.
  if (layout.lora) config.gradient_clipping = 1e-3;
  return config;
}

MoeOptions TestMoe() {
  MoeOptions moe;
  // No random draws: the ranks are threads sharing LibTorch's generator.
  moe.gating = GatingOptions{.num_experts = 4,
                             .top_k = 2,
                             .capacity_factor = 1.0,
                             .min_capacity = 1,
                             .drop_tokens = false,
                             .use_rts = false,
                             .second_expert_sampling = false};
  moe.aux_loss_coef = 0.1;
  moe.z_loss_coef = 0.01;
  return moe;
}

std::shared_ptr<torch::nn::Module> BuildModel(const PipeLayout& layout, const TensorParallelGroup& group,
                                              ModelInterface** family) {
  if (layout.family == "gpt") {
    GptOptions options = testing::TinyGpt();
    options.layers = 6;
    options.heads = 4;
    options.width = 32;
    options.vocab_size = 37;
    options.tensor_parallel = group;
    if (layout.moe) {
      options.moe = TestMoe();
      options.moe.every = 2;
    }
    auto model = std::make_shared<GptImpl>(options, 3);
    *family = model.get();
    return model;
  }
  LlamaOptions options;
  options.layers = 4;
  options.hidden = 32;
  options.heads = 8;
  options.kv_heads = 2;
  options.head_dim = 4;
  options.intermediate = 48;
  options.vocab_size = layout.llama_vocab;
  options.tensor_parallel = group;
  if (layout.moe) options.moe = TestMoe();
  auto model = std::make_shared<LlamaImpl>(options, 3);
  if (layout.lora) testing::ApplyTestLora(*model);
  *family = model.get();
  return model;
}

// Micro-batch m of `step` for data-parallel replica `replica` of `replicas`.
TokenBatch MicroBatch(const PipeLayout& layout, int step, int m, int replica, int replicas) {
  const int64_t micro_rows = kRowsPerStep / layout.micro_batches;
  const int64_t rows = micro_rows / replicas;
  auto [tokens, targets] = testing::Batch(step * kRowsPerStep + m * micro_rows + replica * rows, rows);
  return TokenBatch{tokens, targets};
}

struct Outcome {
  std::vector<double> losses;                   // per step
  std::map<std::string, torch::Tensor> params;  // whole, fp32
  // The largest difference between two ranks' copies of one parameter (a
  // tied copy on another stage, another replica's or slice's) and its name.
  double rank_disagreement = 0;
  std::string disagreeing;
  int recomputed_segments = 0;  // over every rank and step
  // Note [Outputs released once sent], over every rank and step, and the
  // bytes of one micro-batch's activation.
  int64_t released_output_bytes = 0, activation_bytes = 0;
};

// The reference: one process, the plain engine, M micro-batches per step.
Outcome TrainOneProcess(const PipeLayout& s) {
  PipeLayout one = s;
  one.pp = one.tp = one.dp = 1;
  one.zero = 0;
  one.offload = false;
  one.sequence_parallel = false;
  DsConfig config = PipeConfig(one);
  config.pipeline = PipelineConfig{};
  ModelInterface* family = nullptr;
  auto module = BuildModel(one, TensorParallelGroup{}, &family);
  auto engine = Engine::Create(module, config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  EXPECT_TRUE(engine.ok()) << engine.status();
  Outcome outcome;
  for (int step = 0; step < kSteps; ++step) {
    double sum = 0;
    for (int m = 0; m < s.micro_batches; ++m) {
      torch::Tensor loss = family->BatchLoss(MicroBatch(s, step, m, 0, 1));
      sum += loss.item<double>();
      EXPECT_TRUE((*engine)->Backward(loss).ok());
      EXPECT_TRUE((*engine)->Step().ok());
    }
    outcome.losses.push_back(sum / s.micro_batches);
  }
  for (const auto& item : module->named_parameters()) {
    outcome.params[item.key()] = item.value().detach().to(torch::kFloat).clone();
  }
  return outcome;
}

// Which steps a pipelined run trains, and around them a checkpoint loaded
// first or saved after them.
struct RunPlan {
  int first_step = 0;
  int steps = kSteps;
  std::string load_dir;  // resume from its latest checkpoint first
  std::string save_dir;  // save after the steps
};

Outcome TrainPipelined(const PipeLayout& layout, const RunPlan& plan = {}) {
  std::mutex mu;
  Outcome outcome;
  std::vector<std::vector<double>> losses(layout.world());
  testing::InProcessStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < layout.world(); ++rank) {
    threads.emplace_back([&, rank] {
      StoreClient client = store.Client(0);
      auto state = ParallelState::Create(
          layout.world(), rank, ParallelSizes{.tensor = layout.tp, .pipeline = layout.pp},
          [&client](const GroupSpec& spec) { return CreateCommunicator(CommBackend::kGloo, client, spec); }, nullptr);
      ASSERT_TRUE(state.ok()) << state.status();
      const ParallelState& parallel = **state;
      Communicator* tensor = parallel.tensor();
      const TensorParallelGroup group{tensor, tensor ? tensor->rank() : 0, tensor ? tensor->size() : 1,
                                      layout.sequence_parallel};
      ModelInterface* family = nullptr;
      auto module = BuildModel(layout, group, &family);
      auto pipe = PipelineEngine::Create(module, PipeConfig(layout), *state, torch::kCPU);
      ASSERT_TRUE(pipe.ok()) << pipe.status();
      const int replica = parallel.coordinate().data;
      if (!plan.load_dir.empty()) {
        auto client = EngineCheckpointer((*pipe)->engine()).Load(plan.load_dir, "");
        ASSERT_TRUE(client.ok()) << layout.Describe() << ": " << client.status();
        EXPECT_EQ((*pipe)->engine().global_steps(), plan.first_step);
      }
      for (int step = plan.first_step; step < plan.first_step + plan.steps; ++step) {
        std::vector<TokenBatch> batches;
        for (int m = 0; m < layout.micro_batches; ++m) batches.push_back(MicroBatch(layout, step, m, replica, layout.dp));
        auto result = (*pipe)->TrainBatch(batches);
        ASSERT_TRUE(result.ok()) << result.status();
        EXPECT_TRUE(result->step.stepped);
        losses[rank].push_back(result->loss);
        std::lock_guard<std::mutex> lock(mu);
        outcome.recomputed_segments += result->recomputed_segments;
        outcome.released_output_bytes += result->released_output_bytes;
        outcome.activation_bytes = c10::multiply_integers(family->ActivationShape(batches[0])) *
                                   (layout.bf16 ? 2 : 4);
      }
      if (!plan.save_dir.empty()) {
        absl::Status saved = EngineCheckpointer((*pipe)->engine())
                                 .Save(plan.save_dir, absl::StrCat("global_step", plan.first_step + plan.steps), {});
        ASSERT_TRUE(saved.ok()) << saved;
      }
      // This stage's parameters, whole over the tensor group.
      std::map<std::string, TensorParallelForm> forms;
      for (const TensorParallelForm& form : family->TensorParallelForms()) forms[form.parameter] = form;
      std::map<std::string, torch::Tensor> mine;
      for (const auto& item : module->named_parameters()) {
        if (!(*pipe)->held_parameters().count(item.key())) continue;
        torch::Tensor value = item.value().detach().to(torch::kFloat);
        if (auto it = forms.find(item.key()); it != forms.end() && group.split()) {
          auto whole = GatherWhole(value, it->second, group);
          ASSERT_TRUE(whole.ok()) << whole.status();
          value = *whole;
        }
        mine[item.key()] = value.clone();
      }
      std::lock_guard<std::mutex> lock(mu);
      for (auto& [name, value] : mine) {
        auto [it, inserted] = outcome.params.emplace(name, value);
        // A tied copy, or another replica's or slice's: the same values.
        if (!inserted) {
          const double difference = (it->second - value).abs().max().item<double>();
          if (difference > outcome.rank_disagreement) {
            outcome.rank_disagreement = difference;
            outcome.disagreeing = name;
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  // Every rank reports the same loss.
  for (int step = 0; step < plan.steps; ++step) {
    for (int rank = 1; rank < layout.world(); ++rank) {
      if (losses[rank].size() <= static_cast<size_t>(step) || losses[0].size() <= static_cast<size_t>(step)) continue;
      if (layout.dp == 1) EXPECT_EQ(losses[rank][step], losses[0][step]) << layout.Describe() << " rank " << rank;
    }
    double sum = 0;
    for (int rank = 0; rank < layout.world(); ++rank) sum += step < static_cast<int>(losses[rank].size()) ? losses[rank][step] : 0;
    outcome.losses.push_back(sum / layout.world());
  }
  return outcome;
}

// The worst parameter difference; EXPECTs within tolerance unless `quiet`.
double CompareWithOneProcess(const PipeLayout& s, bool quiet = false) {
  const Outcome want = TrainOneProcess(s);
  const Outcome got = TrainPipelined(s);
  const double loss_tolerance = s.bf16 ? 2e-2 : 1e-5;
  const double param_tolerance = s.bf16 ? 6e-2 : 1e-4;
  double worst = 0;
  for (int step = 0; step < kSteps && !quiet; ++step) {
    EXPECT_NEAR(got.losses[step], want.losses[step], loss_tolerance * want.losses[step])
        << s.Describe() << ", step " << step;
  }
  EXPECT_EQ(got.params.size(), want.params.size()) << s.Describe();
  if (!quiet) {
    EXPECT_LE(got.rank_disagreement, 1e-6) << s.Describe() << ": " << got.disagreeing << " differs between ranks";
  }
  for (const auto& [name, value] : want.params) {
    auto it = got.params.find(name);
    if (it == got.params.end()) {
      ADD_FAILURE() << s.Describe() << ": no stage holds " << name;
      continue;
    }
    const double error = (it->second - value).abs().max().item<double>();
    worst = std::max(worst, error);
    if (!quiet) {
      EXPECT_LE(error, param_tolerance) << s.Describe() << ": " << name;
    }
  }
  std::cout << s.Describe() << ": worst parameter difference " << worst << "\n";
  return quiet ? std::max(worst, got.rank_disagreement) : worst;
}

TEST(PipelineTrainingTest, GptAtTwoAndFourStagesMatchesOneProcess) {
  CompareWithOneProcess(PipeLayout{"gpt", 2});
  CompareWithOneProcess(PipeLayout{"gpt", 4});
}

// Note [Outputs released once sent]: every stage but the last releases each
// micro-batch's output as soon as it is sent, long before its backward, and
// the steps stay those of one process (CompareWithOneProcess, above and for
// every layout in this file).
TEST(PipelineTrainingTest, OutputsAreReleasedOnceSent) {
  for (const PipeLayout& layout : {PipeLayout{.family = "llama", .pp = 4},
                                   PipeLayout{.family = "gpt", .pp = 2, .schedule = "interleaved", .virtual_stages = 2}}) {
    const Outcome outcome = TrainPipelined(layout);
    // Each of the virtual stages but the last sends each micro-batch once a step.
    const int64_t sends = static_cast<int64_t>(layout.pp * layout.virtual_stages - 1) * layout.micro_batches * kSteps;
    EXPECT_EQ(outcome.released_output_bytes, sends * outcome.activation_bytes) << layout.Describe();
  }
}

TEST(PipelineTrainingTest, InterleavedAndGPipeSchedulesMatchOneProcess) {
  CompareWithOneProcess(PipeLayout{.family = "gpt", .pp = 2, .schedule = "interleaved", .virtual_stages = 2});
  CompareWithOneProcess(
      PipeLayout{.family = "gpt", .pp = 4, .schedule = "interleaved", .virtual_stages = 2, .micro_batches = 8});
  CompareWithOneProcess(PipeLayout{.family = "llama", .pp = 2, .schedule = "gpipe", .partition = "uniform"});
  CompareWithOneProcess(PipeLayout{.family = "llama", .pp = 2, .schedule = "interleaved", .virtual_stages = 2});
}

TEST(PipelineTrainingTest, LlamaAtFourStagesMatchesOneProcess) {
  CompareWithOneProcess(PipeLayout{.family = "llama", .pp = 4, .partition = "type:LlamaDecoderLayer"});
}

// Note [Experts in pipeline stages]: the auxiliary losses of every stage's
// experts reach the loss every rank reports and their gradient (a stage
// whose backward does not start at the loss gives them the loss's scale),
// with 1F1B and interleaved schedules, recomputed segments and
// Mixtral-style Llama layers. (Not beside data parallelism here: each
// replica balances its own rows' routing, as DeepSpeed's layers do, which
// one process over all the rows does not: the load-balancing loss is not
// linear in the rows.)
TEST(PipelineTrainingTest, MixtureOfExpertsMatchesOneProcess) {
  CompareWithOneProcess(PipeLayout{.family = "gpt", .pp = 2, .moe = true});
  CompareWithOneProcess(PipeLayout{.family = "gpt", .pp = 4, .moe = true});
  CompareWithOneProcess(
      PipeLayout{.family = "gpt", .pp = 2, .schedule = "interleaved", .virtual_stages = 2, .moe = true});
  CompareWithOneProcess(PipeLayout{.family = "gpt", .pp = 2, .checkpoint_interval = 2, .moe = true});
  CompareWithOneProcess(
      PipeLayout{.family = "llama", .pp = 2, .partition = "uniform", .checkpoint_interval = 1, .moe = true});
  CompareWithOneProcess(PipeLayout{.family = "llama", .pp = 4, .partition = "type:LlamaDecoderLayer", .moe = true});
}

TEST(PipelineTrainingTest, PipelineByDataParallelWithZeroOneAndTwoMatchesOneProcess) {
  CompareWithOneProcess(PipeLayout{.family = "gpt", .pp = 2, .dp = 2, .zero = 1});
  CompareWithOneProcess(PipeLayout{.family = "llama", .pp = 2, .dp = 2, .zero = 2});
  CompareWithOneProcess(PipeLayout{.family = "gpt", .pp = 2, .dp = 2, .zero = 2, .offload = true});
  CompareWithOneProcess(PipeLayout{.family = "llama", .pp = 2, .dp = 2, .zero = 1, .offload = true});
}

TEST(PipelineTrainingTest, ThreeDimensionsMatchOneProcess) {
  CompareWithOneProcess(PipeLayout{.family = "gpt", .pp = 2, .tp = 2, .dp = 2, .zero = 1});
  CompareWithOneProcess(PipeLayout{.family = "llama", .pp = 2, .tp = 2, .dp = 2, .zero = 2, .sequence_parallel = true});
}

TEST(PipelineTrainingTest, Bf16MatchesOneProcess) {
  CompareWithOneProcess(PipeLayout{.family = "llama", .pp = 2, .dp = 2, .zero = 1, .bf16 = true});
}

// pipeline.activation_checkpoint_interval: each stage recomputes its
// decoder layers in segments of N in backward and still trains as one
// process. Uniform over 6 layers (embedding, 4 decoder layers, head), each
// stage holds 2 decoder layers: 2 segments per micro-batch each at N = 1, 1
// at N = 3 (the stage's run ends the segment).
TEST(PipelineTrainingTest, CheckpointIntervalRecomputesSegmentsAndMatchesOneProcess) {
  for (int interval : {1, 3}) {
    const PipeLayout layout{.family = "llama", .pp = 2, .partition = "uniform", .checkpoint_interval = interval};
    CompareWithOneProcess(layout);
    const int segments_per_stage = interval == 1 ? 2 : 1;
    EXPECT_EQ(TrainPipelined(layout).recomputed_segments, 2 * segments_per_stage * layout.micro_batches * kSteps)
        << layout.Describe();
  }
  // Across the tied embedding and head, with a tensor group and data parallelism.
  CompareWithOneProcess(PipeLayout{.family = "gpt", .pp = 2, .tp = 2, .dp = 2, .zero = 1, .checkpoint_interval = 2});
}

// LoRA over stages: each stage trains its layers' adapters on its part of
// the frozen base; the partition weighs every parameter (frozen ones too),
// so the stages cut where they cut without adapters. With a vocabulary large
// enough that the frozen embedding weighs a stage of its own, that stage
// would have nothing to train: refused, naming it (weighing the adapters
// alone would hide the embedding's cost instead).
TEST(PipelineTrainingTest, LlamaWithLoraMatchesOneProcess) {
  CompareWithOneProcess(PipeLayout{.family = "llama", .pp = 2, .lora = true});
  CompareWithOneProcess(
      PipeLayout{.family = "llama", .pp = 2, .schedule = "interleaved", .virtual_stages = 2, .lora = true});
  CompareWithOneProcess(PipeLayout{.family = "llama", .pp = 2, .tp = 2, .dp = 2, .zero = 1, .lora = true});
  // A vocabulary that weighs a virtual stage of its own: virtual stage 0 is
  // the frozen embedding alone (stage 0 trains in its second chunk).
  CompareWithOneProcess(PipeLayout{.family = "llama", .pp = 2, .schedule = "interleaved", .virtual_stages = 2,
                                   .lora = true, .llama_vocab = 2000});
}

// The partition lines of `layout` (stage 0's view), or the error.
absl::StatusOr<std::vector<std::string>> PartitionOf(const PipeLayout& layout) {
  testing::InProcessStore store;
  std::vector<std::thread> threads;
  std::mutex mu;
  absl::StatusOr<std::vector<std::string>> lines = std::vector<std::string>{};
  for (int rank = 0; rank < layout.world(); ++rank) {
    threads.emplace_back([&, rank] {
      StoreClient client = store.Client(0);
      auto state = ParallelState::Create(
          layout.world(), rank, ParallelSizes{.pipeline = layout.pp},
          [&client](const GroupSpec& spec) { return CreateCommunicator(CommBackend::kGloo, client, spec); }, nullptr);
      ASSERT_TRUE(state.ok()) << state.status();
      ModelInterface* family = nullptr;
      auto module = BuildModel(layout, TensorParallelGroup{}, &family);
      auto pipe = PipelineEngine::Create(module, PipeConfig(layout), *state, torch::kCPU);
      if (rank != 0) return;
      std::lock_guard<std::mutex> lock(mu);
      if (!pipe.ok()) {
        lines = pipe.status();
        return;
      }
      for (const std::string& line : (*pipe)->partition_lines()) {
        // "stage 0: embedding .. layers.0 (2 layers, N parameters)": the layers, not the counts.
        lines->push_back(line.substr(0, line.find(" layers,")));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return lines;
}

TEST(PipelineTrainingTest, LoraStagesCutWhereTheBaseModelsDo) {
  auto base = PartitionOf(PipeLayout{.family = "llama", .pp = 3});
  auto lora = PartitionOf(PipeLayout{.family = "llama", .pp = 3, .lora = true});
  ASSERT_TRUE(base.ok()) << base.status();
  ASSERT_TRUE(lora.ok()) << lora.status();
  EXPECT_EQ(*lora, *base);
  // A stage left with the frozen embedding alone is refused, naming it.
  auto refused = PartitionOf(PipeLayout{.family = "llama", .pp = 4, .lora = true, .llama_vocab = 2000});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("pipeline stage 0 would hold no trainable parameter (stage 0: embedding"),
            std::string::npos)
      << refused.status();
}

// Megatron's num_layers_per_virtual_pipeline_stage: the GPT's 6 blocks at
// 1 block per chunk over 2 stages are 3 chunks per stage, the embedding
// with the first and the head with the last; training matches one process.
// Blocks that do not divide, and a second cut, are refused naming the key.
TEST(PipelineTrainingTest, LayersPerVirtualStageCutTheModelIntoChunks) {
  const PipeLayout layout{.family = "gpt", .pp = 2, .schedule = "interleaved", .layers_per_virtual_stage = 1};
  auto lines = PartitionOf(layout);
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 6u);
  EXPECT_EQ(lines->front(), "stage 0: embedding .. blocks.0 (2");
  EXPECT_EQ((*lines)[3], "stage 3: blocks.3 (1");
  EXPECT_EQ(lines->back(), "stage 5: blocks.5 .. head (2");
  CompareWithOneProcess(layout);
  auto uneven = PartitionOf(PipeLayout{.family = "gpt", .pp = 2, .schedule = "interleaved", .layers_per_virtual_stage = 2});
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find(
                "pipeline.num_layers_per_virtual_stage=2: the model's 6 blocks do not split into 2 stages x 2 blocks"),
            std::string::npos)
      << uneven.status();
  auto disagreeing = PartitionOf(
      PipeLayout{.family = "gpt", .pp = 2, .schedule = "interleaved", .virtual_stages = 2, .layers_per_virtual_stage = 1});
  ASSERT_FALSE(disagreeing.ok());
  EXPECT_NE(disagreeing.status().message().find("pipeline.virtual_stages=2 but pipeline.num_layers_per_virtual_stage=1 "
                                                "gives 3 model chunks per stage"),
            std::string::npos)
      << disagreeing.status();
}

TEST(PipelineTrainingTest, BrokenTiedSumIsCaught) {
  // The harness is not vacuous: without the tied-gradient sum the GPT's
  // embedding copies drift apart from each other and from one process.
  BreakTiedGradientSumForTesting(true);
  const double worst = CompareWithOneProcess(PipeLayout{"gpt", 2}, /*quiet=*/true);
  BreakTiedGradientSumForTesting(false);
  EXPECT_GT(worst, 1e-3);
}

// Note [Tensor-parallel checkpoints] with stages: a PP 2 x DP 2 run saved
// after two steps resumes bit for bit at the same layout, consolidates into
// one safetensors file, and loads at PP 1, at PP 4 with ZeRO-2 and at
// PP 2 x TP 2 with another partition, each then training as the
// uninterrupted run does (up to the order of sums).
TEST(PipelineTrainingTest, CheckpointsResumeExactlyAndLoadAtOtherLayouts) {
  char pattern[] = "/tmp/pp-checkpoint-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  const PipeLayout saved{.family = "gpt", .pp = 2, .dp = 2, .zero = 1};
  const Outcome whole = TrainPipelined(saved);
  TrainPipelined(saved, RunPlan{.first_step = 0, .steps = 2, .save_dir = dir});
  const RunPlan resume{.first_step = 2, .steps = 2, .load_dir = dir};
  const Outcome same = TrainPipelined(saved, resume);
  for (int step = 0; step < 2; ++step) EXPECT_EQ(same.losses[step], whole.losses[2 + step]) << "step " << 2 + step;
  for (const auto& [name, value] : whole.params) {
    EXPECT_TRUE(torch::equal(same.params.at(name), value)) << name << " differs after an exact resume";
  }
  // dsconsolidate: every parameter once (the tied embedding from stage 0),
  // equal to the saved run's after its two steps.
  const Outcome two = TrainPipelined(PipeLayout{.family = "gpt", .pp = 1, .zero = 1},
                                     RunPlan{.first_step = 2, .steps = 0, .load_dir = dir});
  const std::string output = dir + "/consolidated.safetensors";
  auto summary = ConsolidateCheckpoint(dir, "", output);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->ranks_read, 4);
  auto reader = SafetensorsReader::Open(FileSystem::Default(), output);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->entries().size(), two.params.size());
  for (const auto& [name, value] : two.params) {
    auto view = (*reader)->View(name);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_TRUE(torch::equal(*view, value)) << name << " consolidated differs from the checkpoint";
  }
  for (const PipeLayout& other : {PipeLayout{.family = "gpt", .pp = 1, .zero = 1},
                                  PipeLayout{.family = "gpt", .pp = 4, .zero = 2},
                                  PipeLayout{.family = "gpt", .pp = 2, .tp = 2, .zero = 1, .partition = "uniform"}}) {
    const Outcome loaded = TrainPipelined(other, resume);
    for (int step = 0; step < 2; ++step) {
      EXPECT_NEAR(loaded.losses[step], whole.losses[2 + step], 1e-5 * whole.losses[2 + step])
          << other.Describe() << ", step " << 2 + step;
    }
    for (const auto& [name, value] : whole.params) {
      EXPECT_LE((loaded.params.at(name) - value).abs().max().item<double>(), 1e-4) << other.Describe() << ": " << name;
    }
  }
  EXPECT_TRUE(FileSystem::Default().RemoveTree(dir).ok());  // not std::filesystem (runtime/fs/file_system.h)
}

TEST(PipelineTrainingTest, RefusesWhatItCannotRun) {
  auto refuse = [](const PipeLayout& layout, const std::string& expected) {
    testing::InProcessStore store;
    std::vector<std::thread> threads;
    for (int rank = 0; rank < layout.world(); ++rank) {
      threads.emplace_back([&, rank] {
        StoreClient client = store.Client(0);
        auto state = ParallelState::Create(
            layout.world(), rank, ParallelSizes{.pipeline = layout.pp},
            [&client](const GroupSpec& spec) { return CreateCommunicator(CommBackend::kGloo, client, spec); },
            nullptr);
        ASSERT_TRUE(state.ok()) << state.status();
        ModelInterface* family = nullptr;
        auto module = BuildModel(layout, TensorParallelGroup{}, &family);
        auto pipe = PipelineEngine::Create(module, PipeConfig(layout), *state, torch::kCPU);
        ASSERT_FALSE(pipe.ok()) << layout.Describe();
        EXPECT_NE(pipe.status().message().find(expected), std::string::npos) << pipe.status();
        // The plain engine refuses a pipelined grid.
        auto engine = Engine::Create(module, PipeConfig(layout), *state, torch::kCPU);
        EXPECT_FALSE(engine.ok());
      });
    }
    for (auto& thread : threads) thread.join();
  };
  refuse(PipeLayout{.family = "gpt", .pp = 2, .zero = 3}, "zero_optimization.stage=3");
  refuse(PipeLayout{.family = "gpt", .pp = 2, .schedule = "interleaved", .virtual_stages = 2, .micro_batches = 3},
         "multiple of pipeline.stages");
  refuse(PipeLayout{.family = "gpt", .pp = 2, .partition = "type:Nothing"}, "matches 0 layers");
}

}  // namespace
}  // namespace dslaunch::runtime

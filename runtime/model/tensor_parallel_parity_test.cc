// The tensor-parallel parity harness (issue 16; Note [Tensor parallelism]):
// every split of GPT and Llama over 2 and 4 Gloo ranks, with and without
// sequence parallelism, computes the loss and (gathered) every parameter's
// gradient of the unsplit model, over grouped-query layouts (key/value
// heads 1, 2, 4, 8 against the group size), tied and untied heads, biases,
// label smoothing, packed records, dropout, LoRA adapters and fp32/bf16. A
// deliberately broken reduction makes it fail.
//
// Tolerances, relative to the largest magnitude of each reference tensor:
// fp32 1e-5 for gradients and the loss (the split sums add in another
// order: differences in the last bits); bf16 4e-2 for gradients, 2e-2 for
// the loss (8 significant bits: one rounding is up to 4e-3, and the split
// model rounds its partial sums in other places).
#include <ATen/CPUGeneratorImpl.h>

#include <functional>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/model/gpt.h"
#include "runtime/model/llama.h"
#include "runtime/model/lora.h"
#include "runtime/tensor_parallel/tensor_parallel_ops.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime {
namespace {

using testing::InProcessStore;

constexpr int64_t kVocab = 37;  // padded to 38 over 2 ranks, 40 over 4
constexpr int64_t kTime = 8;

struct Variant {
  int64_t kv_heads = 8;    // Llama only
  bool tied = false;       // Llama (GPT is always tied)
  bool biases = false;     // Llama: attention_bias, o_proj and mlp biases
  bool packed = false;     // Llama: packed records (positions and segments), and every layer checkpointed
  double smoothing = 0;
  torch::ScalarType dtype = torch::kFloat;
  double dropout = 0;         // GPT only (Note [Dropout streams])
  bool checkpointed = false;  // GPT: every block recomputed in backward
  bool partition = false;     // recomputed inputs partitioned (Note [Partitioned activations])
  bool lora = false;          // Llama: adapters on every projection, the rest frozen
  double lora_dropout = 0;    // Llama with lora

  std::string Describe() const {
    return absl::StrCat("kv_heads=", kv_heads, " tied=", tied, " biases=", biases, " packed=", packed,
                        " smoothing=", smoothing, " dtype=", c10::toString(dtype), " dropout=", dropout,
                        " checkpointed=", checkpointed, " partition=", partition, " lora=", lora,
                        " lora_dropout=", lora_dropout);
  }
};

struct Result {
  double loss = 0;
  std::map<std::string, torch::Tensor> gradients;  // whole, fp32
};

TokenBatch Batch(bool packed) {
  TokenBatch batch;
  batch.tokens = (torch::arange(2 * kTime) * 11 % kVocab).view({2, kTime});
  batch.targets = (torch::arange(2 * kTime) * 5 % kVocab).view({2, kTime});
  batch.targets[0][0] = -100;  // a prompt token: no loss
  batch.targets[1][3] = -100;
  if (packed) {
    batch.positions = torch::tensor({0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 0, 0}, torch::kLong).view({2, kTime});
    batch.segments = torch::tensor({1, 1, 1, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0}, torch::kLong).view({2, kTime});
  }
  return batch;
}

std::unique_ptr<torch::nn::Module> BuildModel(const std::string& family, const Variant& v,
                                              const TensorParallelGroup& group, ModelInterface** as_model) {
  if (family == "gpt") {
    GptOptions options;
    options.layers = 2;
    options.heads = 4;
    options.width = 32;
    options.sequence_length = kTime;
    options.vocab_size = kVocab;
    options.tensor_parallel = group;
    options.label_smoothing = v.smoothing;
    options.dropout = v.dropout;
    options.checkpointed_blocks = v.checkpointed ? options.layers : 0;
    options.partition_checkpoints = v.partition;
    auto model = std::make_unique<GptImpl>(options, /*seed=*/7);
    // Every rank of a tensor group, like the unsplit model, draws from the
    // stream of model replica 0 at step 3.
    model->dropout_stream()->Reseed(DropoutStream::ReplicaSeed(1234, 0));
    model->dropout_stream()->StartStep(3);
    *as_model = model.get();
    return model;
  }
  LlamaOptions options;
  options.layers = 2;
  options.hidden = 32;
  options.heads = 8;
  options.kv_heads = v.kv_heads;
  options.head_dim = 4;
  options.intermediate = 48;
  options.vocab_size = kVocab;
  options.tie_word_embeddings = v.tied;
  options.qkv_bias = options.output_bias = options.mlp_bias = v.biases;
  options.tensor_parallel = group;
  options.label_smoothing = v.smoothing;
  // Activation checkpointing recomputes each layer's forward, collectives
  // included, inside the backward pass.
  options.checkpointed_blocks = v.packed ? options.layers : 0;
  options.partition_checkpoints = v.partition;
  auto model = std::make_unique<LlamaImpl>(options, /*seed=*/7);
  if (v.lora) {
    LoraSettings lora;
    lora.adapter.r = 4;
    lora.adapter.alpha = 8;
    lora.adapter.dropout = v.lora_dropout;
    lora.target_modules = {"all-linear"};
    auto applied = ApplyLora(*model, lora, /*seed=*/11);
    EXPECT_TRUE(applied.ok()) << applied.status();
    // B starts at zero, which would leave A without a gradient: every B gets
    // values, drawn whole and sliced like the model's own.
    std::map<std::string, TensorParallelForm> forms;
    for (const TensorParallelForm& form : model->TensorParallelForms()) forms[form.parameter] = form;
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters()) {
      if (item.key().find(".lora_B.") == std::string::npos) continue;
      auto form = forms.find(item.key());
      std::vector<int64_t> whole = item.value().sizes().vec();
      if (form != forms.end()) whole[0] *= group.size;
      auto generator = at::make_generator<at::CPUGeneratorImpl>(std::hash<std::string>()(item.key()));
      torch::Tensor values = torch::randn(whole, generator) * 0.1;
      if (form != forms.end()) values = *SliceForRank(values, form->second, group.rank, group.size);
      item.value().copy_(values);
    }
    model->dropout_stream()->Reseed(DropoutStream::ReplicaSeed(1234, 0));
    model->dropout_stream()->StartStep(3);
  }
  *as_model = model.get();
  return model;
}

// One rank's loss and its gradients gathered whole (a collective).
Result Run(const std::string& family, const Variant& v, const TensorParallelGroup& group) {
  ModelInterface* model = nullptr;
  std::unique_ptr<torch::nn::Module> module = BuildModel(family, v, group, &model);
  module->to(v.dtype);
  const TokenBatch batch = Batch(v.packed);
  torch::Tensor loss = family == "gpt" ? model->Loss(batch.tokens, batch.targets) : model->BatchLoss(batch);
  loss.backward();
  Result result{loss.item<double>(), {}};
  std::map<std::string, TensorParallelForm> forms;
  for (const TensorParallelForm& form : model->TensorParallelForms()) forms[form.parameter] = form;
  for (const auto& item : module->named_parameters()) {
    if (!item.value().requires_grad()) continue;  // frozen under LoRA
    torch::Tensor grad = item.value().grad().to(torch::kFloat);
    auto it = forms.find(item.key());
    if (it != forms.end()) {
      auto whole = GatherWhole(grad, it->second, group);
      EXPECT_TRUE(whole.ok()) << whole.status();
      if (!whole.ok()) continue;
      grad = *whole;
    }
    result.gradients[item.key()] = grad;
  }
  return result;
}

// The tensors whose gradient differs from the reference beyond tolerance.
std::vector<std::string> Mismatches(const Result& got, const Result& want, torch::ScalarType dtype,
                                    std::string* worst_report) {
  const double tolerance = dtype == torch::kFloat ? 1e-5 : 4e-2;
  std::vector<std::string> bad;
  double worst = 0;
  for (const auto& [name, reference] : want.gradients) {
    auto it = got.gradients.find(name);
    if (it == got.gradients.end() || !it->second.sizes().equals(reference.sizes())) {
      bad.push_back(name + " (missing or of another shape)");
      continue;
    }
    const double scale = std::max(reference.abs().max().item<double>(), 1e-12);
    const double error = (it->second - reference).abs().max().item<double>() / scale;
    worst = std::max(worst, error);
    if (error > tolerance) bad.push_back(absl::StrCat(name, " (relative error ", error, ")"));
  }
  *worst_report = absl::StrCat("worst relative gradient error ", worst);
  return bad;
}

// Runs `v` whole and over `size` ranks; fails naming the case on any
// difference beyond tolerance. Returns the mismatching tensors of rank 0.
std::vector<std::string> CheckParity(const std::string& family, const Variant& v, int size, bool sequence_parallel,
                                     bool expect_equal = true) {
  const Result reference = Run(family, v, TensorParallelGroup{});
  const std::string what = absl::StrCat(family, " over ", size, " ranks, sequence parallel ", sequence_parallel,
                                        ", ", v.Describe());
  const double loss_tolerance = v.dtype == torch::kFloat ? 1e-5 : 2e-2;
  std::vector<std::string> rank0_mismatches;
  InProcessStore store;
  store.RunRanks(size, [&](int rank, Communicator& comm) {
    // As dsrank runs it: input gradients reduced on the group's worker
    // (Note [Overlapped input-gradient reduction]).
    const Result split = Run(family, v,
                             TensorParallelGroup{&comm, rank, size, sequence_parallel, std::make_shared<CommWorker>()});
    EXPECT_NEAR(split.loss, reference.loss, loss_tolerance * std::abs(reference.loss)) << what << ", rank " << rank;
    std::string worst;
    std::vector<std::string> bad = Mismatches(split, reference, v.dtype, &worst);
    if (expect_equal) {
      EXPECT_TRUE(bad.empty()) << what << ", rank " << rank << ": " << ::testing::PrintToString(bad);
    }
    if (rank == 0) {
      rank0_mismatches = bad;
      if (expect_equal) std::cout << what << ": " << worst << "\n";
    }
  });
  return rank0_mismatches;
}

class TensorParallelParityTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(TensorParallelParityTest, GptEqualsTheUnsplitModel) {
  const auto [size, sequence_parallel] = GetParam();
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    for (double smoothing : {0.0, 0.1}) {
      Variant v;
      v.smoothing = smoothing;
      v.dtype = dtype;
      CheckParity("gpt", v, size, sequence_parallel);
    }
  }
}

// Dropout (embeddings, attention and MLP outputs), recomputed or not: every
// rank applies its part of the unsplit model's masks (Note [Dropout
// streams]), so the split model is still the unsplit one.
TEST_P(TensorParallelParityTest, GptWithDropoutEqualsTheUnsplitModel) {
  const auto [size, sequence_parallel] = GetParam();
  for (int recompute : {0, 1, 2}) {  // none, whole inputs, partitioned inputs
    Variant v;
    v.dropout = 0.2;
    v.checkpointed = recompute > 0;
    v.partition = recompute == 2;
    CheckParity("gpt", v, size, sequence_parallel);
  }
  // Not vacuous: the masks change the loss.
  Variant with, without;
  with.dropout = 0.2;
  EXPECT_GT(std::abs(dslaunch::runtime::Run("gpt", with, TensorParallelGroup{}).loss -
                     dslaunch::runtime::Run("gpt", without, TensorParallelGroup{}).loss),
            1e-3);
}

TEST_P(TensorParallelParityTest, LlamaEqualsTheUnsplitModelForEveryKeyValueLayout) {
  const auto [size, sequence_parallel] = GetParam();
  for (int64_t kv_heads : {1, 2, 4, 8}) {
    for (bool tied : {false, true}) {
      Variant v;
      v.kv_heads = kv_heads;
      v.tied = tied;
      v.biases = kv_heads == 2;
      v.packed = tied;
      v.partition = tied && kv_heads != 8;  // half the checkpointed cases keep 1/T of the inputs
      v.smoothing = kv_heads == 4 ? 0.1 : 0.0;
      CheckParity("llama", v, size, sequence_parallel);
    }
  }
}

TEST_P(TensorParallelParityTest, LlamaInBf16EqualsTheUnsplitModel) {
  const auto [size, sequence_parallel] = GetParam();
  for (int64_t kv_heads : {1, 8}) {
    Variant v;
    v.kv_heads = kv_heads;
    v.tied = kv_heads == 1;
    v.smoothing = 0.1;
    v.dtype = torch::kBFloat16;
    CheckParity("llama", v, size, sequence_parallel);
  }
}

// LoRA on every projection (Note [LoRA under tensor parallelism]): the
// adapters split with their projections (column: B's rows, row: A's
// columns, replicated key/value heads whole) give the unsplit model's loss
// and adapter gradients, with and without the adapters' dropout and
// recomputation.
TEST_P(TensorParallelParityTest, LlamaWithLoraEqualsTheUnsplitModel) {
  const auto [size, sequence_parallel] = GetParam();
  for (int64_t kv_heads : {1, 8}) {
    for (double dropout : {0.0, 0.25}) {
      Variant v;
      v.lora = true;
      v.kv_heads = kv_heads;
      v.lora_dropout = dropout;
      v.biases = kv_heads == 1;
      v.packed = dropout > 0;  // every layer recomputed in backward
      CheckParity("llama", v, size, sequence_parallel);
    }
  }
  // Not vacuous: the adapters' dropout changes the loss.
  Variant with, without;
  with.lora = without.lora = true;
  with.lora_dropout = 0.25;
  EXPECT_GT(std::abs(dslaunch::runtime::Run("llama", with, TensorParallelGroup{}).loss -
                     dslaunch::runtime::Run("llama", without, TensorParallelGroup{}).loss),
            1e-4);
}

INSTANTIATE_TEST_SUITE_P(SizesAndSequenceParallel, TensorParallelParityTest,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return absl::StrCat("Tp", std::get<0>(info.param),
                                               std::get<1>(info.param) ? "SequenceParallel" : "");
                         });

// The harness can fail: with the column-parallel input gradient left
// unreduced, the forward (and so the loss) is still right but gradients
// before the last layer are not, and the harness names them.
TEST(TensorParallelParityHarnessTest, ABrokenReductionIsCaught) {
  for (bool sequence_parallel : {false, true}) {
    for (const std::string family : {"gpt", "llama"}) {
      BreakReductionForTesting(BrokenReduction::kColumnInputGradient);
      Variant v;
      v.kv_heads = 2;
      std::vector<std::string> bad = CheckParity(family, v, 2, sequence_parallel, /*expect_equal=*/false);
      BreakReductionForTesting(BrokenReduction::kNone);
      EXPECT_FALSE(bad.empty()) << family << ", sequence parallel " << sequence_parallel
                                << ": the broken reduction went unnoticed";
    }
  }
}

// The adapters' partial gradients left unsummed (A of column-parallel
// projections, B of row-parallel ones): the loss is right, the adapters'
// gradients are not, and the harness names them.
TEST(TensorParallelParityHarnessTest, AnUnreducedAdapterGradientIsCaught) {
  for (bool sequence_parallel : {false, true}) {
    BreakReductionForTesting(BrokenReduction::kReplicatedParameterGradient);
    Variant v;
    v.lora = true;
    std::vector<std::string> bad = CheckParity("llama", v, 2, sequence_parallel, /*expect_equal=*/false);
    BreakReductionForTesting(BrokenReduction::kNone);
    EXPECT_THAT(bad, ::testing::Contains(::testing::HasSubstr("self_attn.q_proj.lora_A.weight")));
    EXPECT_THAT(bad, ::testing::Contains(::testing::HasSubstr("mlp.down_proj.lora_B.weight")));
  }
}

// Memory: a rank holds 1/T of every split parameter (the vocabulary
// padded) and the whole of every replicated one.
TEST(TensorParallelParityHarnessTest, SplitModelsHoldTheirShareOfTheParameters) {
  InProcessStore store;
  store.RunRanks(4, [&](int rank, Communicator& comm) {
    Variant v;
    v.kv_heads = 2;
    ModelInterface* whole_model = nullptr;
    ModelInterface* split_model = nullptr;
    auto whole = BuildModel("llama", v, TensorParallelGroup{}, &whole_model);
    auto split = BuildModel("llama", v, TensorParallelGroup{&comm, rank, 4}, &split_model);
    int64_t whole_count = CountParameters(*whole), split_count = CountParameters(*split);
    // k_proj and v_proj (2 key/value heads over 4 ranks) are whole on every
    // rank; the vocabulary pads from 37 to 40 rows.
    int64_t replicated = 0;
    for (const auto& item : split->named_parameters()) {
      if (item.key().find("norm") != std::string::npos || item.key().find("k_proj") != std::string::npos ||
          item.key().find("v_proj") != std::string::npos) {
        replicated += item.value().numel();
      }
    }
    const int64_t padding = (40 - kVocab) * 32 * 2;  // embedding and lm_head
    EXPECT_EQ((split_count - replicated) * 4, whole_count - replicated + padding) << "rank " << rank;
  });
}

}  // namespace
}  // namespace dslaunch::runtime

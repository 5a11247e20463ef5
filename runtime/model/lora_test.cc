// LoRA on the Llama family (Note [LoRA]): by properties an error would break.
// (The PEFT folder against an independent reference: tests/hf/.)
#include "runtime/model/lora.h"

#include <map>

#include <ATen/CPUGeneratorImpl.h>

#include "gmock/gmock.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/model/llama.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

LlamaOptions SmallLora() {
  LlamaOptions o;
  o.layers = 2;
  o.hidden = 32;
  o.intermediate = 48;
  o.heads = 4;
  o.kv_heads = 2;
  o.head_dim = 8;
  o.vocab_size = 50;
  return o;
}

torch::Tensor LoraTokens() { return (torch::arange(2 * 7) * 7 % 50).view({2, 7}); }

LoraSettings QkvO(int64_t r = 4) {
  LoraSettings settings;
  settings.adapter.r = r;
  settings.adapter.alpha = 16;
  settings.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
  return settings;
}

TEST(LoraTest, AnAdaptedModelStartsWhereItsBaseIsAndOnlyTheAdaptersTrain) {
  Llama llama(SmallLora(), 1);
  torch::NoGradGuard no_grad;
  const torch::Tensor before = llama->forward(LoraTokens());
  auto summary = ApplyLora(*llama, QkvO(), 5);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->adapted_projections, 8);  // 4 per layer, 2 layers
  // q: A [4, 32] + B [32, 4]; k and v: B [16, 4]; o: A [4, 32] + B [32, 4].
  EXPECT_EQ(summary->trainable_parameters, 2 * (4 * 32 + 32 * 4 + 2 * (4 * 32 + 16 * 4) + 4 * 32 + 32 * 4));
  EXPECT_TRUE(torch::equal(llama->forward(LoraTokens()), before)) << "lora_B starts at zero";
  int64_t trainable = 0;
  for (const auto& item : llama->named_parameters()) {
    EXPECT_EQ(item.value().requires_grad(), IsLoraParameterName(item.key())) << item.key();
    trainable += item.value().requires_grad() ? item.value().numel() : 0;
  }
  EXPECT_EQ(trainable, summary->trainable_parameters);
  EXPECT_NE(llama->named_parameters().find("model.layers.1.self_attn.v_proj.lora_B.weight"), nullptr);
  EXPECT_EQ(llama->named_parameters().find("model.layers.1.mlp.up_proj.lora_A.weight"), nullptr);
}

TEST(LoraTest, TheAdapterAddsScaleTimesBAxAndMergesIntoTheSameFunction) {
  Llama llama(SmallLora(), 1);
  ASSERT_TRUE(ApplyLora(*llama, QkvO(), 5).ok());
  torch::NoGradGuard no_grad;
  llama->eval();
  for (auto& item : llama->named_parameters()) {
    if (IsLoraParameterName(item.key())) item.value().normal_(0, 0.2);
  }
  auto* q = llama->model->layers[0]->as<LlamaDecoderLayer>()->self_attn->q_proj.get();
  const torch::Tensor x = torch::randn({3, 32});
  const torch::Tensor expected = torch::matmul(x, q->weight.t()) +
                                 torch::matmul(torch::matmul(x, q->lora_A->weight.t()), q->lora_B->weight.t()) * 4.0;
  EXPECT_TRUE(torch::allclose(q->forward(x), expected, 1e-5, 1e-6)) << "scale = lora_alpha / r = 16 / 4";

  // A plain model holding the merged weights computes the same logits.
  Llama merged(SmallLora(), 2);
  auto target = merged->named_parameters();
  for (const std::string& name : MergedParameterNames(*llama)) target[name].copy_(MergedParameter(*llama, name));
  EXPECT_EQ(MergedParameterNames(*llama).size(), target.size());
  EXPECT_TRUE(torch::allclose(merged->forward(LoraTokens()), llama->forward(LoraTokens()), 1e-4, 1e-5));
  EXPECT_FALSE(torch::allclose(merged->forward(LoraTokens()), Llama(SmallLora(), 1)->forward(LoraTokens()), 1e-3, 1e-3))
      << "the adapters changed nothing: the test would pass on a broken merge";
}

// With every layer recomputed in backward (the embedding frozen, so no
// layer's input needs a gradient) the adapters get the gradients they get
// without recomputation, dropout masks included. Seen failing: backward
// stopped at the first recomputed layer ("does not require grad").
TEST(LoraTest, RecomputedLayersGiveTheAdaptersTheirGradients) {
  std::map<std::string, torch::Tensor> reference;
  for (bool recomputed : {false, true}) {
    LlamaOptions options = SmallLora();
    options.checkpointed_blocks = recomputed ? options.layers : 0;
    Llama llama(options, 1);
    LoraSettings settings = QkvO();
    settings.adapter.dropout = 0.25;
    ASSERT_TRUE(ApplyLora(*llama, settings, 5).ok());
    torch::NoGradGuard no_grad;
    auto generator = at::make_generator<at::CPUGeneratorImpl>(17);
    for (auto& item : llama->named_parameters()) {
      if (item.key().find("lora_B") != std::string::npos) item.value().normal_(0, 0.2, generator);
    }
    llama->dropout_stream()->StartStep(2);
    torch::Tensor loss;
    {
      torch::AutoGradMode grad(true);
      const torch::Tensor tokens = LoraTokens();
      loss = llama->Loss(tokens, tokens.roll(-1, 1));
      loss.backward();
    }
    for (const auto& item : llama->named_parameters()) {
      if (!item.value().requires_grad()) continue;
      ASSERT_TRUE(item.value().grad().defined()) << item.key() << ", recomputed " << recomputed;
      if (!recomputed) {
        reference[item.key()] = item.value().grad().clone();
      } else {
        EXPECT_TRUE(torch::equal(item.value().grad(), reference.at(item.key()))) << item.key();
      }
    }
  }
  EXPECT_EQ(reference.size(), 16u);  // A and B of 8 projections
}

TEST(LoraTest, RsLoraScalesByTheSquareRootOfTheRank) {
  LoraAdapterOptions options;
  options.r = 16;
  options.alpha = 8;
  EXPECT_DOUBLE_EQ(options.scale(), 0.5);
  options.use_rslora = true;
  EXPECT_DOUBLE_EQ(options.scale(), 2.0);
}

// Note [Frozen parameters at ZeRO-3]: every unit names its trainable and its
// frozen tensors apart, each side in parameters() order; the frozen-only
// embedding and head are units (stage 3 partitions them too).
TEST(LoraTest, ZeroThreeUnitsNameTheAdaptersAndTheFrozenBaseApart) {
  Llama llama(SmallLora(), 1);
  ASSERT_EQ(llama->ParameterUnits().size(), 4u);  // embedding, 2 layers, head
  ASSERT_TRUE(ApplyLora(*llama, QkvO(), 5).ok());
  const std::vector<ParameterUnit> units = llama->ParameterUnits();
  ASSERT_EQ(units.size(), 4u);
  std::vector<std::string> trainable, frozen;
  for (const auto& item : llama->named_parameters()) {
    (item.value().requires_grad() ? trainable : frozen).push_back(item.key());
  }
  int64_t next_trainable = 0, next_frozen = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const ParameterUnit& unit = units[u];
    EXPECT_EQ(unit.layer, u == 1 || u == 2) << u;
    EXPECT_EQ(unit.first_parameter, next_trainable) << u;
    EXPECT_EQ(unit.first_frozen, next_frozen) << u;
    next_trainable += unit.parameter_count;
    next_frozen += unit.frozen_count;
    for (int64_t i = unit.first_frozen; i < unit.first_frozen + unit.frozen_count; ++i) {
      const std::string where = u == 0 ? "embed_tokens" : u == 3 ? "" : absl::StrCat("layers.", u - 1, ".");
      EXPECT_NE(frozen.at(i).find(where), std::string::npos) << "unit " << u << " holds " << frozen.at(i);
    }
  }
  EXPECT_EQ(units[0].parameter_count, 0);  // the embedding: frozen only
  EXPECT_EQ(units[3].parameter_count, 0);  // the final norm and head
  EXPECT_EQ(units[1].parameter_count, 8);  // A and B of 4 projections
  EXPECT_EQ(next_trainable, static_cast<int64_t>(trainable.size()));
  EXPECT_EQ(next_frozen, static_cast<int64_t>(frozen.size()));
  std::vector<int> index;
  const std::vector<ParameterUnit> trainable_side = TrainableSide(units, &index);
  EXPECT_EQ(index, (std::vector<int>{-1, 0, 1, -1}));
  ASSERT_EQ(trainable_side.size(), 2u);
  EXPECT_EQ(trainable_side[1].first_parameter, 8);
  const std::vector<ParameterUnit> frozen_side = FrozenSide(units, &index);
  EXPECT_EQ(index, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(frozen_side[2].first_parameter, units[2].first_frozen);
  EXPECT_EQ(frozen_side[2].parameter_count, units[2].frozen_count);
}

TEST(LoraTest, TargetsThatMatchNothingAreRefusedByName) {
  Llama llama(SmallLora(), 1);
  LoraSettings settings = QkvO();
  settings.target_modules = {"q_proj", "query_key_value"};
  auto applied = ApplyLora(*llama, settings, 5);
  ASSERT_FALSE(applied.ok());
  EXPECT_THAT(std::string(applied.status().message()), HasSubstr("'query_key_value' matches no projection"));
  EXPECT_THAT(std::string(applied.status().message()), HasSubstr("gate_proj"));
  for (const auto& p : llama->parameters()) EXPECT_TRUE(p.requires_grad()) << "nothing was frozen";
}

// PEFT's string form of target_modules: re.fullmatch against whole names.
TEST(LoraTest, APatternAdaptsTheProjectionsWhoseWholeNameItMatches) {
  Llama llama(SmallLora(), 1);
  LoraSettings settings = QkvO();
  settings.target_modules.clear();
  settings.target_pattern = R"(model\.layers\.[1-9]\d*\.self_attn\.(q|v)_proj)";  // layer 0 left out
  auto applied = ApplyLora(*llama, settings, 5);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->adapted_projections, 2);
  const auto params = llama->named_parameters();
  EXPECT_NE(params.find("model.layers.1.self_attn.q_proj.lora_A.weight"), nullptr);
  EXPECT_NE(params.find("model.layers.1.self_attn.v_proj.lora_B.weight"), nullptr);
  EXPECT_EQ(params.find("model.layers.0.self_attn.q_proj.lora_A.weight"), nullptr);
  // A whole-name match: "q_proj" alone is no pattern for "...self_attn.q_proj".
  Llama other(SmallLora(), 1);
  settings.target_pattern = "q_proj";
  auto partial = ApplyLora(*other, settings, 5);
  ASSERT_FALSE(partial.ok());
  EXPECT_THAT(std::string(partial.status().message()),
              HasSubstr("'q_proj' matches no projection of this model (it has q_proj"));
  EXPECT_THAT(std::string(partial.status().message()), HasSubstr("whole names such as model.layers.0."));
  settings.target_pattern = "(q_proj";
  auto broken = ApplyLora(*other, settings, 5);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("the pattern '(q_proj' is not a regular expression"));
  settings.target_modules = {"q_proj"};
  settings.target_pattern = ".*q_proj";
  EXPECT_FALSE(ApplyLora(*other, settings, 5).ok()) << "a list and a pattern at once";
  for (const auto& p : other->parameters()) EXPECT_TRUE(p.requires_grad()) << "nothing was frozen";
}

TEST(LoraTest, AllLinearAdaptsEveryProjectionButTheHead) {
  Llama llama(SmallLora(), 1);
  LoraSettings settings = QkvO();
  settings.target_modules = {"all-linear"};
  auto applied = ApplyLora(*llama, settings, 5);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->adapted_projections, 14);  // 7 per layer
  EXPECT_EQ(llama->named_parameters().find("lm_head.lora_A.weight"), nullptr);
}

// Note [LoRA under tensor parallelism]: a factor is split where its
// projection's weight is (column: B's rows, in the weight's fused parts;
// row: A's columns) and whole otherwise; a vocabulary-split projection's
// adapter has no form.
TEST(LoraTest, AdapterFactorsSplitWithTheirProjections) {
  TensorParallelForm column{"model.layers.0.self_attn.q_proj.weight", TensorParallelSplit::kColumn, /*fused_parts=*/3};
  auto b = LoraFactorForm(column, "model.layers.0.self_attn.q_proj.lora_B.weight");
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(b->has_value());
  EXPECT_EQ((*b)->parameter, "model.layers.0.self_attn.q_proj.lora_B.weight");
  EXPECT_EQ((*b)->split, TensorParallelSplit::kColumn);
  EXPECT_EQ((*b)->fused_parts, 3);
  auto a = LoraFactorForm(column, "model.layers.0.self_attn.q_proj.lora_A.weight");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->has_value());

  const TensorParallelForm row{"model.layers.0.mlp.down_proj.weight", TensorParallelSplit::kRow};
  a = LoraFactorForm(row, "model.layers.0.mlp.down_proj.lora_A.weight");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->split, TensorParallelSplit::kRow);
  b = LoraFactorForm(row, "model.layers.0.mlp.down_proj.lora_B.weight");
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->has_value());

  const TensorParallelForm vocab{"lm_head.weight", TensorParallelSplit::kVocab, 1, 50, 52};
  b = LoraFactorForm(vocab, "lm_head.lora_B.weight");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(b.status().message(), HasSubstr("split by vocabulary"));
  EXPECT_EQ(LoraFactorForm(row, "model.layers.0.mlp.down_proj.weight").status().code(),
            absl::StatusCode::kInvalidArgument);

  // On a model: the forms of the factors of its split projections only.
  LlamaImpl model(SmallLora(), /*seed=*/1);
  ASSERT_TRUE(ApplyLora(model, QkvO(), /*seed=*/2).ok());
  const std::vector<TensorParallelForm> projection_forms = {
      {"model.layers.1.self_attn.k_proj.weight", TensorParallelSplit::kColumn},
      {"model.layers.1.self_attn.o_proj.weight", TensorParallelSplit::kRow},
      {"model.layers.1.mlp.up_proj.weight", TensorParallelSplit::kColumn}};  // not adapted
  auto forms = LoraAdapterForms(model, projection_forms);
  ASSERT_TRUE(forms.ok()) << forms.status();
  std::vector<std::string> names;
  for (const TensorParallelForm& form : *forms) names.push_back(form.parameter);
  EXPECT_THAT(names, ::testing::ElementsAre("model.layers.1.self_attn.k_proj.lora_B.weight",
                                            "model.layers.1.self_attn.o_proj.lora_A.weight"));
}

TEST(LoraTest, ThePeftConfigSaysWhatPeftReads) {
  LoraSettings settings = QkvO(16);
  settings.adapter.dropout = 0.05;
  const std::string json = PeftAdapterConfigJson(settings, "/models/llama");
  EXPECT_THAT(json, HasSubstr("\"peft_type\": \"LORA\""));
  EXPECT_THAT(json, HasSubstr("\"r\": 16,"));
  EXPECT_THAT(json, HasSubstr("\"lora_alpha\": 16,"));
  EXPECT_THAT(json, HasSubstr("\"lora_dropout\": 0.05,"));
  EXPECT_THAT(json, HasSubstr("\"target_modules\": [\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\"]"));
  EXPECT_THAT(json, HasSubstr("\"base_model_name_or_path\": \"/models/llama\""));
}

}  // namespace
}  // namespace dslaunch::runtime

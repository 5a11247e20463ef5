// Note [LoRA checkpoints to Hugging Face]: adapters found by their pairs,
// merged as the job's own export merges them.
#include "runtime/checkpoint/lora_merge.h"

#include <ATen/CPUGeneratorImpl.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/model/lora_linear.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(LoraMergeTest, AdaptedProjectionsArePairsAndAnUnpairedAdapterIsNamed) {
  auto found = LoraAdaptedProjections({"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.lora_A.weight",
                                       "model.layers.0.self_attn.q_proj.lora_B.weight",
                                       "model.layers.1.mlp.up_proj.lora_B.weight",
                                       "model.layers.1.mlp.up_proj.lora_A.weight"});
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_THAT(*found, ElementsAre("model.layers.0.self_attn.q_proj", "model.layers.1.mlp.up_proj"));
  auto none = LoraAdaptedProjections({"model.norm.weight", "lm_head.weight"});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto unpaired = LoraAdaptedProjections({"model.layers.0.self_attn.v_proj.lora_A.weight"});
  ASSERT_FALSE(unpaired.ok());
  EXPECT_THAT(unpaired.status().message(), HasSubstr("model.layers.0.self_attn.v_proj.lora_A.weight has no "
                                                     "model.layers.0.self_attn.v_proj.lora_B.weight"));
}

// The merge equals the projection's own (what export.hf_dir writes), with
// and without rsLoRA; shapes that do not fit are named.
TEST(LoraMergeTest, TheMergeIsTheProjectionsOwn) {
  for (bool rslora : {false, true}) {
    LoraLinear projection(12, 10, /*bias=*/false);
    LoraAdapterOptions adapter;
    adapter.r = 4;
    adapter.alpha = 8;
    adapter.use_rslora = rslora;
    projection->EnableAdapter(adapter, at::make_generator<at::CPUGeneratorImpl>(3));
    {
      torch::NoGradGuard no_grad;
      projection->lora_B->weight.normal_(0, 0.5, at::make_generator<at::CPUGeneratorImpl>(4));
    }
    auto merged = MergeLoraWeight("p", projection->weight.detach(), projection->lora_A->weight.detach(),
                                  projection->lora_B->weight.detach(), LoraMergeSettings{8, rslora});
    ASSERT_TRUE(merged.ok()) << merged.status();
    EXPECT_TRUE(torch::equal(*merged, projection->MergedWeight())) << "rslora " << rslora;
    EXPECT_FALSE(torch::equal(*merged, projection->weight.detach()));
  }
  auto bad = MergeLoraWeight("model.layers.0.self_attn.q_proj", torch::zeros({10, 12}), torch::zeros({4, 11}),
                             torch::zeros({10, 4}), LoraMergeSettings{8, false});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("model.layers.0.self_attn.q_proj: the adapter's lora_A [4, 11]"));
  EXPECT_FALSE(MergeLoraWeight("p", torch::zeros({2, 2}), torch::zeros({1, 2}), torch::zeros({2, 1}), {}).ok());
}

}  // namespace
}  // namespace dslaunch::runtime

// Every registered model family keeps the contract of Note [Model interface].
#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/model/model_registry.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

ModelSpec Tiny(const std::string& type) {
  ModelSpec spec;
  spec.type = type;
  spec.layers = 3;
  spec.heads = 2;
  spec.width = 16;
  spec.sequence_length = 8;
  spec.vocab_size = 40;
  return spec;
}

class ModelFamilyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelFamilyTest, LayersOwnEveryParameterOnceInParameterOrder) {
  auto built = BuildModel(Tiny(GetParam()), 7);
  ASSERT_TRUE(built.ok()) << built.status();
  std::vector<std::string> in_layers;
  for (const ModelLayer& layer : built->model->Layers()) {
    EXPECT_FALSE(layer.type.empty()) << layer.name;
    for (const std::string& name : layer.parameters) in_layers.push_back(name);
  }
  std::vector<std::string> module_order;
  int64_t elements = 0;
  for (const auto& item : built->module->named_parameters()) {
    module_order.push_back(item.key());
    elements += item.value().numel();
  }
  EXPECT_EQ(in_layers, module_order);
  EXPECT_EQ(built->model->ParameterCount(), elements);
  // ZeRO-3's units cover the same parameters, in the same order.
  int64_t next = 0;
  for (const ParameterUnit& unit : built->model->ParameterUnits()) {
    EXPECT_EQ(unit.first_parameter, next);
    next += unit.parameter_count;
  }
  EXPECT_EQ(next, static_cast<int64_t>(module_order.size()));
}

TEST_P(ModelFamilyTest, TiedParametersAndTensorParallelFormsNameRealParameters) {
  auto built = BuildModel(Tiny(GetParam()), 7);
  ASSERT_TRUE(built.ok()) << built.status();
  std::map<std::string, torch::Tensor> parameters;
  for (const auto& item : built->module->named_parameters()) parameters[item.key()] = item.value();
  std::map<std::string, std::set<std::string>> owned;
  for (const ModelLayer& layer : built->model->Layers()) owned[layer.name].insert(layer.parameters.begin(), layer.parameters.end());
  for (const TiedParameter& tied : built->model->TiedParameters()) {
    ASSERT_TRUE(parameters.count(tied.parameter)) << tied.parameter;
    ASSERT_GE(tied.layers.size(), 2u) << tied.parameter;
    for (const std::string& layer : tied.layers) EXPECT_TRUE(owned.count(layer)) << layer;
    EXPECT_TRUE(owned[tied.layers[0]].count(tied.parameter)) << "the first user owns " << tied.parameter;
  }
  for (const TensorParallelForm& form : built->model->TensorParallelForms()) {
    ASSERT_TRUE(parameters.count(form.parameter)) << form.parameter;
    const torch::Tensor& p = parameters[form.parameter];
    if (form.split == TensorParallelSplit::kRow) {
      EXPECT_EQ(p.dim(), 2) << form.parameter;
    } else {
      EXPECT_EQ(p.size(0) % form.fused_parts, 0) << form.parameter;
    }
  }
}

TEST_P(ModelFamilyTest, TheLossIsAFiniteScalarWithGradients) {
  auto built = BuildModel(Tiny(GetParam()), 7);
  ASSERT_TRUE(built.ok()) << built.status();
  torch::Tensor tokens = (torch::arange(2 * 9) * 5 % 39).view({2, 9});
  torch::Tensor loss = built->model->Loss(tokens.narrow(1, 0, 8), tokens.narrow(1, 1, 8));
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  loss.backward();
  for (const auto& p : built->module->parameters()) EXPECT_TRUE(p.grad().defined());
}

INSTANTIATE_TEST_SUITE_P(EveryFamily, ModelFamilyTest, ::testing::ValuesIn(ModelFamilies()));

TEST(ModelRegistryTest, AnUnknownTypeNamesTheKnownFamilies) {
  auto built = BuildModel(Tiny("bert"), 7);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(built.status().message(),
              HasSubstr("model.type 'bert' is not a model family this runtime has (gpt, llama)"));
}

TEST(ModelRegistryTest, GptLayersAreEmbeddingBlocksHead) {
  auto built = BuildModel(Tiny("gpt"), 7);
  ASSERT_TRUE(built.ok());
  std::vector<std::string> names;
  for (const ModelLayer& layer : built->model->Layers()) names.push_back(layer.name);
  EXPECT_EQ(names, (std::vector<std::string>{"embedding", "blocks.0", "blocks.1", "blocks.2", "head"}));
  EXPECT_EQ(built->model->family(), "gpt");
}

}  // namespace
}  // namespace dslaunch::runtime

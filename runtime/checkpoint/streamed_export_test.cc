// Note [Streamed export at ZeRO-3]: the Hugging Face export, the PEFT
// adapter export and stage3_gather_16bit_weights_on_model_save's file gather
// one unit at a time on every rank, so exporting never holds more of the
// model whole than a training step does; what they write is the model's
// (gathered whole afterwards and compared tensor for tensor).
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "runtime/checkpoint/engine_checkpointer.h"
#include "runtime/hf/safetensors_reader.h"
#include "runtime/model/lora.h"
#include "runtime/testing/disk_test_folder.h"
#include "runtime/testing/tensor_parallel_training.h"

namespace dslaunch::runtime {
namespace {

using testing::TensorParallelLayout;

// Every tensor of a safetensors file, as fp32.
std::map<std::string, torch::Tensor> ReadAll(const std::string& path) {
  std::map<std::string, torch::Tensor> tensors;
  auto reader = SafetensorsReader::Open(FileSystem::Default(), path);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return tensors;
  for (const SafetensorsEntryInfo& entry : (*reader)->entries()) {
    auto view = (*reader)->View(entry.name);
    EXPECT_TRUE(view.ok()) << view.status();
    if (view.ok()) tensors[entry.name] = view->to(torch::kFloat).clone();
  }
  return tensors;
}

TEST(StreamedExportTest, AtStageThreeEachRankGathersOneUnitAtATime) {
  testing::DiskTestFolder folder("streamed-export-test");
  TensorParallelLayout layout{"llama", /*tp=*/1, /*dp=*/2, /*stage=*/3};
  layout.lora = true;
  std::map<std::string, torch::Tensor> merged, adapters, trainable;
  testing::RunTensorParallelRanks(layout, [&](int rank, const ParallelState& state) {
    ModelInterface* family = nullptr;
    auto module = testing::BuildTensorParallelModel(layout, TensorParallelGroup{}, &family);
    DsConfig config = testing::TensorParallelConfig(layout);
    config.zero_optimization.stage3_prefetch_bucket_size = 0;  // one layer unit at a time in training too
    config.zero_optimization.stage3_gather_16bit_weights_on_model_save = true;
    std::shared_ptr<const ParallelState> borrowed(&state, [](const ParallelState*) {});
    auto engine = Engine::Create(module, config, borrowed, torch::kCPU);
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<double> losses;
    testing::TrainTensorParallelSteps(**engine, *family, layout, state, 0, 2, &losses);
    const int64_t training_peak = (*engine)->Memory().gathered_peak_elements;
    int64_t whole = 0;
    for (const auto& p : module->parameters()) whole += p.numel();
    EXPECT_LT(training_peak, whole);

    EngineCheckpointer checkpointer(**engine);
    HfExportOptions options;
    options.dtype = torch::kFloat;
    options.config_json = "{}";
    options.folder = folder.path() + "/merged";
    ASSERT_TRUE(checkpointer.ExportHuggingFace(options).ok());
    options.folder = folder.path() + "/adapter";
    ASSERT_TRUE(checkpointer.ExportPeftAdapter(options).ok());
    ASSERT_TRUE(checkpointer.Save(folder.path() + "/checkpoints", "step2", ClientState{}).ok());
    EXPECT_EQ((*engine)->Memory().gathered_peak_elements, training_peak)
        << "an export held more of the model whole than a step";

    // What was written is the model's.
    ASSERT_TRUE((*engine)->GatherFullParameters().ok());
    if (rank == 0) {
      torch::NoGradGuard no_grad;
      for (const std::string& name : MergedParameterNames(*module)) merged[name] = MergedParameter(*module, name).clone();
      for (const auto& item : module->named_parameters()) {
        if (IsLoraParameterName(item.key())) adapters[kPeftKeyPrefix + item.key()] = item.value().detach().clone();
        if (item.value().requires_grad()) trainable[item.key()] = item.value().detach().clone();
      }
    }
    ASSERT_TRUE(checkpointer.Save(folder.path() + "/checkpoints", "step2-again", ClientState{}).ok());
  });
  for (const auto& [path, want] : {std::pair{folder.path() + "/merged/model.safetensors", &merged},
                                   std::pair{folder.path() + "/adapter/adapter_model.safetensors", &adapters},
                                   std::pair{folder.path() + "/checkpoints/step2/" + Engine::kGatheredWeightsFile,
                                             &trainable}}) {
    const std::map<std::string, torch::Tensor> got = ReadAll(path);
    ASSERT_EQ(got.size(), want->size()) << path;
    for (const auto& [name, value] : *want) {
      ASSERT_TRUE(got.count(name)) << path << ": " << name;
      EXPECT_TRUE(torch::equal(got.at(name), value.to(torch::kFloat))) << path << ": " << name;
    }
  }
}

}  // namespace
}  // namespace dslaunch::runtime

// Hugging Face folders in and out: a Llama written by ExportHfFolder loads
// back into another Llama exactly, and a broken folder is refused naming the
// file and the tensor before any parameter changes.
#include <stdlib.h>

#include <cerrno>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fs/fault_injecting_file_system.h"
#include "runtime/hf/hf_export.h"
#include "runtime/hf/hf_model_folder.h"
#include "runtime/hf/hf_weights.h"
#include "runtime/hf/safetensors_reader.h"
#include "runtime/model/llama.h"
#include "runtime/model/llama_hf_config.h"
#include "runtime/testing/hf_test_llama.h"
#include "runtime/testing/temp_folder.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;
using TempFolder = testing::TempFolder;


LlamaHfConfig TinyConfig(bool tied) { return testing::HfTestLlamaConfig(/*vocab_size=*/40, tied); }

std::vector<HfTensorSpec> SpecsOf(torch::nn::Module& module) {
  std::vector<HfTensorSpec> specs;
  for (const auto& item : module.named_parameters()) specs.push_back({item.key(), item.value().sizes().vec()});
  return specs;
}

// Writes `llama` as a Hugging Face folder at `folder`.
absl::Status Export(Llama& llama, const LlamaHfConfig& config, const std::string& folder, torch::ScalarType dtype,
                    int64_t max_shard_bytes) {
  HfExportOptions options;
  options.folder = folder;
  options.dtype = dtype;
  options.max_shard_bytes = max_shard_bytes;
  options.config_json = LlamaHfConfigJson(config, TorchDtypeName(dtype));
  auto parameters = llama->named_parameters();
  return ExportHfFolder(FileSystem::Default(), options, SpecsOf(*llama),
                        [&](const std::string& name) -> absl::StatusOr<torch::Tensor> { return parameters[name]; });
}

absl::Status Load(const std::string& folder, Llama& into) {
  auto model = HfModelFolder::Open(FileSystem::Default(), folder);
  if (!model.ok()) return model.status();
  return LoadHfWeights(**model, *into);
}

TEST(HfModelFolderTest, AShardedExportLoadsBackExactly) {
  TempFolder temp("dshf");
  const LlamaHfConfig config = TinyConfig(/*tied=*/false);
  Llama original(config.options, 1);
  const std::string folder = temp.path() + "/model";
  ASSERT_TRUE(Export(original, config, folder, torch::kFloat, 8000).ok());
  // Cut into shards with an index (each layer is 7.8 KB in fp32).
  EXPECT_TRUE(FileSystem::Default().Exists(folder + "/model.safetensors.index.json"));
  EXPECT_FALSE(FileSystem::Default().Exists(folder + "/model.safetensors"));
  EXPECT_TRUE(FileSystem::Default().Exists(folder + "/model-00001-of-00003.safetensors"));
  EXPECT_FALSE(FileSystem::Default().Exists(temp.path() + "/.model.export-partial"));

  Llama loaded(config.options, 2);
  ASSERT_TRUE(Load(folder, loaded).ok());
  auto a = original->named_parameters(), b = loaded->named_parameters();
  for (const auto& item : a) EXPECT_TRUE(torch::equal(item.value(), b[item.key()])) << item.key();
  torch::NoGradGuard no_grad;
  torch::Tensor tokens = torch::arange(12).view({2, 6});
  EXPECT_TRUE(torch::equal(original->forward(tokens), loaded->forward(tokens)));
}

// An export over an earlier one, named with a trailing '/': the user's own
// model.old and model.partial beside it are never touched; a new folder that
// cannot take the old one's place (the rename fails) leaves the old one where
// it was, and nothing else behind.
TEST(HfModelFolderTest, AnExportReplacesOnlyItsOwnFolderAndPutsTheOldOneBackOnFailure) {
  TempFolder temp("dshf");
  const LlamaHfConfig config = TinyConfig(/*tied=*/false);
  FileSystem& fs = FileSystem::Default();
  const std::string folder = temp.path() + "/model";
  for (const char* mine : {"/model.old", "/model.partial"}) {
    ASSERT_TRUE(fs.CreateDirectories(temp.path() + mine).ok());
    ASSERT_TRUE(WriteFileAtomically(fs, temp.path() + mine + "/mine", "keep").ok());
  }
  Llama first(config.options, 1), second(config.options, 2), loaded(config.options, 3);
  ASSERT_TRUE(Export(first, config, folder + "/", torch::kFloat, 1 << 30).ok());
  ASSERT_TRUE(Export(second, config, folder + "//", torch::kFloat, 1 << 30).ok());
  ASSERT_TRUE(Load(folder, loaded).ok());
  EXPECT_TRUE(torch::equal(loaded->parameters()[0], second->parameters()[0]));
  for (const char* mine : {"/model.old/mine", "/model.partial/mine"}) EXPECT_TRUE(fs.Exists(temp.path() + mine)) << mine;

  FaultInjectingFileSystem faulty(fs);
  faulty.FailNth(FsOp::kRename, 1, ENOSPC, ".model.export-partial");
  HfExportOptions options;
  options.folder = folder;
  options.dtype = torch::kFloat;
  options.max_shard_bytes = 1 << 30;
  options.config_json = LlamaHfConfigJson(config, TorchDtypeName(torch::kFloat));
  auto parameters = first->named_parameters();
  absl::Status exported = ExportHfFolder(faulty, options, SpecsOf(*first),
                                         [&](const std::string& name) -> absl::StatusOr<torch::Tensor> {
                                           return parameters[name];
                                         });
  EXPECT_EQ(exported.code(), absl::StatusCode::kResourceExhausted) << exported;
  ASSERT_TRUE(Load(folder, loaded).ok());
  EXPECT_TRUE(torch::equal(loaded->parameters()[0], second->parameters()[0])) << "the earlier export is back";
  EXPECT_FALSE(fs.Exists(temp.path() + "/.model.export-partial"));
  EXPECT_FALSE(fs.Exists(temp.path() + "/.model.export-old"));
  EXPECT_FALSE(fs.Exists(folder + "/.partial"));
}

// A tied model's folder may carry lm_head.weight too (older conversions
// saved it): accepted when it equals the embedding (compared a block of rows
// at a time, 2,100 rows here), refused naming the tensor when it differs.
TEST(HfModelFolderTest, ATiedModelAcceptsAHeadEqualToItsEmbeddingOnly) {
  for (bool equal : {true, false}) {
    TempFolder temp("dshf");
    LlamaHfConfig config = TinyConfig(/*tied=*/true);
    config.options.vocab_size = 2100;
    Llama original(config.options, 3);
    HfExportOptions options;
    options.folder = temp.path() + "/model";
    options.dtype = torch::kFloat;
    options.max_shard_bytes = 1 << 30;
    options.config_json = LlamaHfConfigJson(config, TorchDtypeName(torch::kFloat));
    std::vector<HfTensorSpec> specs = SpecsOf(*original);
    specs.push_back({"lm_head.weight", {2100, 16}});
    auto parameters = original->named_parameters();
    torch::Tensor head = parameters["model.embed_tokens.weight"].detach().clone();
    if (!equal) head[2050][3] += 1;  // in the third block of rows
    ASSERT_TRUE(ExportHfFolder(FileSystem::Default(), options, specs,
                               [&](const std::string& name) -> absl::StatusOr<torch::Tensor> {
                                 return name == "lm_head.weight" ? head : parameters[name];
                               })
                    .ok());
    Llama loaded(config.options, 4);
    absl::Status status = Load(options.folder, loaded);
    if (equal) {
      EXPECT_TRUE(status.ok()) << status;
    } else {
      EXPECT_THAT(status.message(), HasSubstr("tensor 'lm_head.weight' differs from model.embed_tokens.weight"));
    }
  }
}

TEST(HfModelFolderTest, Bf16ExportsRoundToBf16AndTiedModelsHaveNoHead) {
  TempFolder temp("dshf");
  const LlamaHfConfig config = TinyConfig(/*tied=*/true);
  Llama original(config.options, 3);
  const std::string folder = temp.path() + "/model";
  ASSERT_TRUE(Export(original, config, folder, torch::kBFloat16, 1 << 30).ok());
  auto model = HfModelFolder::Open(FileSystem::Default(), folder);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->Find("lm_head.weight"), nullptr);
  EXPECT_EQ((*model)->Find("model.norm.weight")->dtype, SafetensorsDtype::kBF16);
  Llama loaded(config.options, 4);
  ASSERT_TRUE(Load(folder, loaded).ok());
  auto a = original->named_parameters(), b = loaded->named_parameters();
  for (const auto& item : a) {
    EXPECT_TRUE(torch::equal(item.value().to(torch::kBFloat16).to(torch::kFloat), b[item.key()])) << item.key();
  }
}

// Rewrites one file of the folder.
void Replace(const std::string& path, const std::function<void(std::string&)>& edit) {
  auto content = FileSystem::Default().ReadFile(path);
  ASSERT_TRUE(content.ok());
  edit(*content);
  ASSERT_TRUE(WriteFileAtomically(FileSystem::Default(), path, *content).ok());
}

TEST(HfModelFolderTest, BrokenFoldersAreRefusedNamingTheFileAndTensorAndChangeNothing) {
  TempFolder temp("dshf");
  const LlamaHfConfig config = TinyConfig(/*tied=*/false);
  Llama original(config.options, 5);
  struct Case {
    std::string name;
    std::function<void(const std::string& folder)> breaks;
    std::string message;
  };
  auto config_with = [&](const std::function<void(LlamaHfConfig&)>& change) {
    return [=](const std::string& folder) {
      LlamaHfConfig changed = config;
      change(changed);
      ASSERT_TRUE(WriteFileAtomically(FileSystem::Default(), folder + "/config.json",
                                      LlamaHfConfigJson(changed, "float32"))
                      .ok());
    };
  };
  const std::vector<Case> cases = {
      {"missing tensor", config_with([](LlamaHfConfig& c) { c.options.layers = 3; }),
       "tensor 'model.layers.2.mlp.down_proj.weight' is missing"},
      {"unexpected tensor", config_with([](LlamaHfConfig& c) { c.options.layers = 1; }),
       "model-00003-of-00003.safetensors: tensor 'model.layers.1.input_layernorm.weight' is not a parameter"},
      {"shape", config_with([](LlamaHfConfig& c) { c.options.intermediate = 20; }),
       "tensor 'model.layers.0.mlp.down_proj.weight' has shape [16, 24] but"},
      {"dtype", [&](const std::string& folder) {
         Replace(folder + "/config.json", [](std::string& text) {
           text.replace(text.find("\"float32\""), 9, "\"bfloat16\"");
         });
       }, "tensor 'model.embed_tokens.weight' is F32 but"},
      {"truncated", [&](const std::string& folder) {
         Replace(folder + "/model-00003-of-00003.safetensors", [](std::string& text) { text.resize(text.size() - 3); });
       }, "model-00003-of-00003.safetensors: tensor 'lm_head.weight': data_offsets end at byte"},
      {"header lies", [&](const std::string& folder) {
         Replace(folder + "/model-00001-of-00003.safetensors", [](std::string& text) {
           const size_t at = text.find("\"shape\":[40,16]");
           text.replace(at, 15, "\"shape\":[40,15]");
         });
       }, "model-00001-of-00003.safetensors: tensor 'model.embed_tokens.weight': 2560 bytes for shape [40, 15]"},
      {"index names a missing file", [&](const std::string& folder) {
         ASSERT_TRUE(FileSystem::Default().RemoveFile(folder + "/model-00002-of-00003.safetensors").ok());
       }, "names model-00002-of-00003.safetensors, which is missing"},
      {"index lists a tensor its file lacks", [&](const std::string& folder) {
         Replace(folder + "/model.safetensors.index.json", [](std::string& text) {
           text.replace(text.find("\"weight_map\": {"), 15, "\"weight_map\": {\"extra.weight\": \"model-00001-of-00003.safetensors\",");
         });
       }, "model-00001-of-00003.safetensors: has no tensor 'extra.weight'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string folder = temp.path() + "/" + c.name;
    ASSERT_TRUE(Export(original, config, folder, torch::kFloat, 8000).ok());
    c.breaks(folder);
    // The model the folder's (possibly changed) config.json describes.
    auto model = HfModelFolder::Open(FileSystem::Default(), folder);
    absl::Status status = model.status();
    if (model.ok()) {
      auto described = ParseLlamaHfConfig((*model)->config_text(), (*model)->config_path());
      ASSERT_TRUE(described.ok()) << described.status();
      Llama target(described->options, 6);
      std::map<std::string, torch::Tensor> before;
      for (const auto& item : target->named_parameters()) before[item.key()] = item.value().clone();
      status = LoadHfWeights(**model, *target);
      for (const auto& item : target->named_parameters()) {
        EXPECT_TRUE(torch::equal(item.value(), before[item.key()])) << item.key() << " changed";
      }
    }
    ASSERT_FALSE(status.ok());
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
  }
}

TEST(HfExportTest, ShardSizesAndDtypesParseAsHuggingFaceWritesThem) {
  EXPECT_EQ(*ParseShardSize("5GB", "--max_shard_size"), 5'000'000'000);
  EXPECT_EQ(*ParseShardSize("500MB", "--max_shard_size"), 500'000'000);
  EXPECT_EQ(*ParseShardSize("2GiB", "--max_shard_size"), 2LL << 30);
  EXPECT_EQ(*ParseShardSize("1000", "--max_shard_size"), 1000);
  EXPECT_THAT(ParseShardSize("5 parsecs", "--max_shard_size").status().message(),
              HasSubstr("--max_shard_size '5 parsecs' is not a size"));
  EXPECT_EQ(*ParseExportDtype("bf16", "--dtype"), torch::kBFloat16);
  EXPECT_FALSE(ParseExportDtype("int8", "--dtype").ok());
}

}  // namespace
}  // namespace dslaunch::runtime

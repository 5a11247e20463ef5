// Note [Streamed layer weights]: a model whose decoder layers stream
// through two slots generates what the model left whole generates, each
// layer's tensors live in its slot, and the slots are loaded in the order
// the forwards need, once per layer that must move.
#include "runtime/generate/streamed_layer_weights.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fs/file_system.h"
#include "runtime/generate/generation_engine.h"
#include "runtime/generate/int8_weights.h"
#include "runtime/testing/disk_test_folder.h"
#include "runtime/testing/generation_llama.h"

namespace dslaunch::runtime {
namespace {

LlamaOptions Tiny(int64_t layers) {
  LlamaOptions options = testing::GenerationTestLlama(/*heads=*/4, /*kv_heads=*/2);
  options.layers = layers;
  options.qkv_bias = true;
  return options;
}

Llama Model(int64_t layers, bool int8) {
  Llama model(Tiny(layers), /*seed=*/5);
  model->eval();
  if (int8) {
    auto report = QuantizeWeightsInt8(model);
    EXPECT_TRUE(report.ok()) << report.status();
  }
  return model;
}

std::vector<int64_t> Prompt(int64_t length) {
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < length; ++i) prompt.push_back((i * 11 + 3) % 64);
  return prompt;
}

// The model left whole on `device` and the one streamed to it: the forward's
// logits (bit for bit on the CPU; on a GPU within a rounding, since the
// product kernels may differ for a view at an offset: a layer read from a
// slot before its copy landed is off by far more) and the engine's tokens.
void ExpectTheStreamedModelGeneratesWhatTheWholeOneDoes(const torch::Device& device,
                                                       const StreamedLayerWeightsOptions& streaming = {}) {
  for (auto [layers, int8] : {std::pair{4, false}, std::pair{3, false}, std::pair{5, true}, std::pair{1, false}}) {
    SCOPED_TRACE(::testing::Message() << layers << " layers" << (int8 ? ", int8" : "") << " on " << device
                                      << " from " << streaming.home);
    Llama whole = Model(layers, int8);
    whole->to(device);
    Llama streamed = Model(layers, int8);
    auto installed = StreamedLayerWeights::Install(streamed, device, streaming);
    ASSERT_TRUE(installed.ok()) << installed.status();
    torch::NoGradGuard no_grad;
    // The forward the probe and training read, logit for logit, twice (the
    // second forward reads layers 0 and 1 as the first one's end reloaded them).
    const torch::Tensor ids = torch::tensor(Prompt(9), torch::kLong).view({1, -1}).to(device);
    for (int pass = 0; pass < 2; ++pass) {
      const torch::Tensor expected = whole->forward(ids);
      const torch::Tensor actual = streamed->forward(ids);
      if (device.is_cpu()) {
        EXPECT_TRUE(torch::equal(expected, actual)) << "pass " << pass;
      } else {
        EXPECT_TRUE(torch::allclose(expected, actual, /*rtol=*/1e-4, /*atol=*/1e-5))
            << "pass " << pass << ": largest difference " << (expected - actual).abs().max().item<float>();
      }
    }
    // Cached generation, two requests at once over several steps.
    std::vector<std::vector<int64_t>> tokens;
    std::vector<std::vector<double>> logprobs;
    for (Llama model : {whole, streamed}) {
      GenerationEngineOptions options;
      options.block_size = 4;
      options.max_sequences = 2;
      options.max_tokens_per_step = 5;
      auto engine = GenerationEngine::Create(model, options);
      ASSERT_TRUE(engine.ok()) << engine.status();
      std::vector<GenerationRequest> requests(2);
      requests[0].prompt = Prompt(7);
      requests[1].prompt = Prompt(3);
      for (GenerationRequest& request : requests) request.max_new_tokens = 12;
      auto results = (*engine)->GenerateAll(requests);
      ASSERT_TRUE(results.ok()) << results.status();
      for (const GenerationResult& result : *results) {
        tokens.push_back(result.tokens);
        logprobs.push_back(result.logprobs);
      }
    }
    ASSERT_EQ(tokens.size(), 4u);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(tokens[r + 2], tokens[r]) << "request " << r;
      ASSERT_EQ(logprobs[r + 2].size(), logprobs[r].size());
      // The whole model's engine joins q/k/v (and gate/up) into one product.
      for (size_t t = 0; t < logprobs[r].size(); ++t) {
        EXPECT_NEAR(logprobs[r + 2][t], logprobs[r][t], device.is_cpu() ? 1e-5 : 1e-4);
      }
    }
  }
}

// Layer files (Note [Pieces on NVMe]) need a real file system, not
// tmpfs: a folder beside the test, removed after it.
class LayerFilesFolder {
 public:
  StreamedLayerWeightsOptions Options() const {
    StreamedLayerWeightsOptions options;
    options.home = "nvme";
    options.files.nvme_path = folder_.path();
    options.files.name = "model";
    return options;
  }
  std::string File(int64_t layer) const {
    return folder_.path() + "/dslaunch-swap/model/piece." + std::to_string(layer) + ".swp";
  }

 private:
  testing::DiskTestFolder folder_{"streamed-layers-test"};
};

TEST(StreamedLayerWeightsTest, TheStreamedModelGeneratesWhatTheWholeOneDoes) {
  ExpectTheStreamedModelGeneratesWhatTheWholeOneDoes(torch::kCPU);
}

TEST(StreamedLayerWeightsTest, TheModelStreamedFromLayerFilesGeneratesWhatTheWholeOneDoes) {
  LayerFilesFolder folder;
  ExpectTheStreamedModelGeneratesWhatTheWholeOneDoes(torch::kCPU, folder.Options());
}

// On a GPU the copies run on a stream of their own from pinned memory: a
// missing wait shows as a layer computed with another layer's weights.
TEST(StreamedLayerWeightsTest, TheStreamedModelGeneratesWhatTheWholeOneDoesOnAGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  ExpectTheStreamedModelGeneratesWhatTheWholeOneDoes(torch::kCUDA);
  LayerFilesFolder folder;
  ExpectTheStreamedModelGeneratesWhatTheWholeOneDoes(torch::kCUDA, folder.Options());
}

// Each layer is read from its file every time it moves in; the host keeps
// the staging buffers only; a file changed under a running engine fails the
// step by the file's name, and the layer files go with the model.
TEST(StreamedLayerWeightsTest, LayerFilesAreReadAsTheLayersMoveInAndAChangedOneFailsTheStepByName) {
  LayerFilesFolder folder;
  Llama model = Model(4, /*int8=*/false);
  auto installed = StreamedLayerWeights::Install(model, torch::kCPU, folder.Options());
  ASSERT_TRUE(installed.ok()) << installed.status();
  StreamedLayerWeights& streamer = **installed;
  ASSERT_NE(streamer.files(), nullptr);
  const int64_t per_layer = streamer.layer_bytes() / 4;
  EXPECT_EQ(streamer.files()->read_bytes(), 2 * per_layer) << "layers 0 and 1 at install";
  EXPECT_LT(streamer.host_bytes(), streamer.layer_bytes()) << "two staging buffers, not four layers";
  EXPECT_THAT(streamer.Describe(), ::testing::HasSubstr("4 decoder layers' weights on NVMe: 4 files under"));
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = torch::tensor(Prompt(5), torch::kLong).view({1, -1});
  model->forward(ids);
  EXPECT_EQ(streamer.files()->read_bytes(), 6 * per_layer);
  EXPECT_EQ(streamer.copied_bytes(), 6 * per_layer);

  GenerationEngineOptions options;
  options.block_size = 4;
  options.max_sequences = 1;
  options.max_tokens_per_step = 8;
  auto engine = GenerationEngine::Create(model, options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  GenerationRequest request;
  request.prompt = Prompt(6);
  request.max_new_tokens = 4;
  ASSERT_TRUE((*engine)->GenerateAll({request}).ok());
  // Layer 3's file changes; layer 2 was read ahead of it, then layer 3 is
  // read (ahead, or when asked) during the next step.
  const int fd = ::open(folder.File(3).c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const unsigned char flipped = 0x5a;
  ASSERT_EQ(::pwrite(fd, &flipped, 1, 4096 + 17), 1);
  ::close(fd);
  auto failed = (*engine)->GenerateAll({request});
  for (int attempt = 0; attempt < 2 && failed.ok(); ++attempt) failed = (*engine)->GenerateAll({request});
  ASSERT_FALSE(failed.ok()) << "a changed layer file went unnoticed";
  EXPECT_THAT(std::string(failed.status().message()),
              ::testing::HasSubstr(folder.File(3) + ": checksum mismatch"));
  engine->reset();
  installed->reset();
  model = Llama(nullptr);
  EXPECT_FALSE(FileSystem::Default().Exists(folder.File(0))) << "the files go with the streamer";
}

TEST(StreamedLayerWeightsTest, EachLayerLivesInItsSlotAndTheSlotsFollowTheOrderOfTheForwards) {
  Llama model = Model(4, /*int8=*/false);
  std::vector<torch::Tensor> head_tensors = {model->model->embed_tokens->weight, model->model->norm->weight};
  auto installed = StreamedLayerWeights::Install(model, torch::kCPU);
  ASSERT_TRUE(installed.ok()) << installed.status();
  StreamedLayerWeights& streamer = **installed;
  EXPECT_EQ(model->layer_residency(), &streamer);
  // Layer i's tensors are views of slot i % 2; the rest is outside both.
  auto storage = [](const torch::Tensor& tensor) { return tensor.storage().unsafeGetStorageImpl(); };
  int64_t layer_bytes = 0;
  for (int64_t i = 0; i < 4; ++i) {
    const auto* slot = storage(model->model->layers[i % 2]->parameters()[0]);
    for (const torch::Tensor& tensor : model->model->layers[i]->parameters()) {
      layer_bytes += tensor.numel() * tensor.element_size();
      EXPECT_EQ(storage(tensor), slot) << "layer " << i;
      EXPECT_EQ(tensor.storage_offset() * tensor.element_size() % 256, 0) << "layer " << i;
    }
  }
  EXPECT_NE(storage(model->model->layers[0]->parameters()[0]), storage(model->model->layers[1]->parameters()[0]));
  for (const torch::Tensor& tensor : head_tensors) {
    EXPECT_NE(storage(tensor), storage(model->model->layers[0]->parameters()[0]));
    EXPECT_NE(storage(tensor), storage(model->model->layers[1]->parameters()[0]));
  }
  EXPECT_GE(streamer.host_bytes(), layer_bytes);
  EXPECT_LT(streamer.device_bytes(), streamer.host_bytes()) << "two slots of four layers";
  // Install loads layers 0 and 1; a forward then moves each layer once: after
  // layer i runs, layer i + 2 (and at the end 0 and 1 for the next forward).
  const int64_t per_layer = streamer.host_bytes() / 4;
  EXPECT_EQ(streamer.copied_bytes(), 2 * per_layer);
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = torch::tensor(Prompt(5), torch::kLong).view({1, -1});
  model->forward(ids);
  EXPECT_EQ(streamer.copied_bytes(), 6 * per_layer);
  EXPECT_EQ(streamer.layer_in_slot(0), 0);
  EXPECT_EQ(streamer.layer_in_slot(1), 1);
  model->forward(ids);
  EXPECT_EQ(streamer.copied_bytes(), 10 * per_layer);
  // Layers asked out of order are loaded when asked.
  streamer.BeforeLayer(3);
  EXPECT_EQ(streamer.layer_in_slot(1), 3);
  EXPECT_EQ(streamer.copied_bytes(), 11 * per_layer);
  // A streamed model does not train.
  model->train();
  EXPECT_THROW(model->forward(ids), c10::Error);
}

}  // namespace
}  // namespace dslaunch::runtime

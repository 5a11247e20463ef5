// generation_bench: the generation engine's speed on one device, with a
// reference measured in the same run.
//
//   generation_bench [--shape 7b|tiny] [--device cuda] [--dtype bfloat16]
//                    [--prompt_tokens 2000] [--decode_tokens 256]
//                    [--batch 64] [--batch_prompt_tokens 128] [--batch_new_tokens 128]
//                    [--reference_tokens 16] [--hbm_tb_per_s 4.8] [--key_length_multiples 1,128]
//                    [--fused_kernels] [--cuda_graphs] [--int8] [--profile_decode]
//                    [--offload_params cpu|nvme [--nvme_path DIR] [--cuda_memory_limit_gb G]
//                     [--pcie_gb_per_s 55] [--drive_gb_per_s G]]
//
// Random weights of the shape (Llama-2-7B: 32 layers of width 4096, 32
// heads, MLP 11008, vocabulary 32000). Prints one line per figure:
//   - the weights' bytes and the HBM roofline of batch-1 decoding
//     (bandwidth / weight bytes: every weight is read once per token);
//   - time to first token of a --prompt_tokens prompt (one prefill step);
//   - batch-1 decode tokens/s after a 128-token prompt, and its share of
//     the roofline; per token, the wall time of the forward and of choosing
//     the token on the host;
//   - the reference: greedy decoding that runs the whole sequence again for
//     every token (no cache), from the same prompt, tokens/s;
//   - --batch requests at once (continuous batching): generated tokens/s;
//   - the greedy choice of a step (Note [Choosing on the device]) at 1 and
//     --batch rows of the vocabulary, to the host: the kernel against
//     LibTorch's ops, microseconds a step (the same ops on a CPU);
//   - with --cuda_graphs, the decode figures again with decode steps replayed
//     from CUDA graphs (Note [Decode graphs]), their greedy tokens checked
//     against the eager run's (a difference at batch 1 fails the run);
//   - with --offload_params cpu (ZeRO-Inference, Note [Streamed layer
//     weights]): the decoder layers stream from pinned host memory, the
//     roofline is the link's (--pcie_gb_per_s over the layers' bytes), and
//     each decode figure also says the bytes the copies moved per second;
//     --cuda_memory_limit_gb caps the GPU below the model's size to show
//     that the model does not fit it whole;
//   - with --offload_params nvme --nvme_path DIR (Note [Pieces on
//     NVMe]): the layers stream from files under DIR, the roofline is
//     --drive_gb_per_s (the drive's read rate, when given; else PCIe's), and
//     each decode figure also says the bytes read from the drive per second.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/flag_table.h"
#include "runtime/generate/generation_engine.h"
#include "runtime/generate/greedy_choice.h"
#include "runtime/generate/int8_weights.h"
#include "runtime/offload/swapped_pieces.h"
#include "runtime/generate/streamed_layer_weights.h"
#include "runtime/hf/hf_export.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {
namespace {

struct Options {
  std::string shape = "7b";
  std::string device = "cuda";
  std::string dtype = "bfloat16";
  int64_t prompt_tokens = 2000;
  int64_t decode_tokens = 256;
  int64_t batch = 64;
  int64_t batch_prompt_tokens = 128;
  int64_t batch_new_tokens = 128;
  int64_t reference_tokens = 16;
  double hbm_tb_per_s = 4.8;
  std::string key_length_multiples = "128";
  bool fused_kernels = false;
  bool int8 = false;
  bool cuda_graphs = false;
  bool profile_decode = false;
  std::string offload_params = "none";
  double cuda_memory_limit_gb = 0;
  double pcie_gb_per_s = 55;  // an assumed PCIe 5.0 x16 host-to-device rate, not a measurement: the run prints what it reached
  std::string nvme_path;
  double drive_gb_per_s = 0;  // the drive's read rate (0: not given)
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

std::vector<int64_t> Prompt(int64_t length, int64_t vocab, int64_t salt) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back((i * 7919 + salt * 104729 + 1) % vocab);
  return ids;
}

// Microseconds a call of `choose` takes, the result copied to the host as the
// engine copies it (which waits for the device).
template <typename Choose>
double MicrosecondsPerChoice(const torch::Tensor& logits, Choose choose) {
  constexpr int kCalls = 200;
  for (int i = 0; i < 10; ++i) choose(logits).to(torch::kCPU);  // warm-up
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) choose(logits).to(torch::kCPU);
  return 1e6 * Seconds(start) / kCalls;
}

void PrintGreedyChoiceTimes(const torch::TensorOptions& logits_options, int64_t vocab, int64_t batch) {
  for (int64_t rows : {int64_t{1}, batch}) {
    if (rows < 1) break;
    const torch::Tensor logits = torch::randn({rows, vocab}, logits_options);
    const double kernel = MicrosecondsPerChoice(logits, [](const torch::Tensor& l) { return ChooseGreedily(l); });
    const double libtorch =
        MicrosecondsPerChoice(logits, [](const torch::Tensor& l) { return ChooseGreedilyWithLibTorch(l); });
    absl::PrintF("greedy choice, %d row(s) of %d logits to the host: %.1f us (ChooseGreedily), %.1f us (LibTorch ops), "
                 "%.2fx\n",
                 rows, vocab, kernel, libtorch, libtorch / kernel);
    if (batch == 1) break;
  }
}

absl::Status Run(const Options& options) {
  LlamaOptions shape;
  if (options.shape == "7b") {
    shape.layers = 32;
    shape.hidden = 4096;
    shape.intermediate = 11008;
    shape.heads = 32;
    shape.kv_heads = 32;
    shape.head_dim = 128;
    shape.vocab_size = 32000;
    shape.rope.max_position_embeddings = 4096;
  } else {
    shape.layers = 2;
    shape.hidden = 64;
    shape.intermediate = 172;
    shape.heads = 4;
    shape.kv_heads = 4;
    shape.head_dim = 16;
    shape.vocab_size = 256;
    shape.rope.max_position_embeddings = 4096;
  }
  shape.fused_kernels = options.fused_kernels;  // RMSNorm, RoPE, SwiGLU and paged decode attention kernels (CUDA)
  auto dtype = ParseExportDtype(options.dtype, "--dtype");
  if (!dtype.ok()) return dtype.status();
  torch::Device device(options.device);
  const auto built = std::chrono::steady_clock::now();
  if (options.cuda_memory_limit_gb > 0) {
    if (absl::Status limited = compat::LimitCudaMemory(device.index() < 0 ? 0 : device.index(),
                                                       options.cuda_memory_limit_gb * (1 << 30));
        !limited.ok()) {
      return limited;
    }
  }
  const bool streamed = options.offload_params != "none";
  if ((options.offload_params == "nvme") != !options.nvme_path.empty()) {
    return absl::InvalidArgumentError("--nvme_path goes with --offload_params nvme, and it needs one");
  }
  Llama model(shape, /*seed=*/1);
  model->to(streamed ? torch::Device(torch::kCPU) : device, *dtype);
  model->eval();
  if (options.int8) {
    absl::StatusOr<Int8Report> quantized = QuantizeWeightsInt8(model);
    if (!quantized.ok()) return quantized.status();
  }
  std::shared_ptr<StreamedLayerWeights> streamer;
  if (streamed) {
    StreamedLayerWeightsOptions streaming;
    streaming.home = options.offload_params;
    streaming.files.nvme_path = options.nvme_path;
    streaming.files.name = absl::StrCat("generation-bench-", ::getpid());
    if (options.offload_params == "nvme") {
      // Those of benchmarks that were killed before removing theirs.
      auto stale = RemoveSwapFoldersOfEndedProcesses(options.nvme_path, "generation-bench-");
      if (!stale.ok()) return stale.status();
    }
    auto installed = StreamedLayerWeights::Install(model, device, streaming);
    if (!installed.ok()) return installed.status();
    streamer = *installed;
    absl::PrintF("%s\n", streamer->Describe());
  }
  // What a decode step reads: the parameters, and int8 weights with their scales.
  int64_t weight_bytes = 0;
  for (const auto& p : model->parameters()) weight_bytes += p.numel() * p.element_size();
  for (const auto& b : model->buffers()) weight_bytes += b.numel() * b.element_size();
  // Streamed: every step moves the decoder layers over the link.
  const bool from_drive = streamed && options.offload_params == "nvme" && options.drive_gb_per_s > 0;
  const double link_gb_per_s = from_drive ? options.drive_gb_per_s : options.pcie_gb_per_s;
  const double roofline = streamed ? link_gb_per_s * 1e9 / static_cast<double>(streamer->layer_bytes())
                                   : options.hbm_tb_per_s * 1e12 / static_cast<double>(weight_bytes);
  absl::PrintF(
      "model %s %s on %s%s: %.2f GB of weights (built in %.0f s); batch-1 roofline %.1f tokens/s at %s\n",
      options.shape, options.dtype, options.device,
      absl::StrCat(options.fused_kernels ? " (fused kernels)" : "", options.int8 ? " (int8 weights)" : "",
                   streamed ? " (streamed layers)" : ""),
      weight_bytes / 1e9, Seconds(built), roofline,
      streamed ? absl::StrFormat("%.1f GB/s of %s", link_gb_per_s, from_drive ? "the drive" : "PCIe")
               : absl::StrFormat("%.2f TB/s", options.hbm_tb_per_s));
  std::vector<int64_t> multiples;
  for (absl::string_view part : absl::StrSplit(options.key_length_multiples, ',')) {
    int64_t m = 0;
    if (!absl::SimpleAtoi(part, &m) || m < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--key_length_multiples: '", part, "' is not a whole number >= 1"));
    }
    multiples.push_back(m);
  }
  double engine_rate = 0, graph_rate = 0;
  bool tokens_differ = false;
  const std::vector<int64_t> prompt = Prompt(128, shape.vocab_size, 3);
  for (int64_t multiple : multiples) {
    absl::PrintF("-- key length multiple %d\n", multiple);

    auto engine_for = [&](int64_t sequences, int64_t positions, int64_t step_tokens, bool graphs = false) {
      GenerationEngineOptions engine;
      engine.max_sequences = sequences;
      engine.max_tokens_per_step = std::max(step_tokens, sequences);
      engine.cache_positions = positions;
      engine.key_length_multiple = multiple;
      engine.cuda_graphs = graphs;
      return GenerationEngine::Create(model, engine);
    };
    auto greedy = [](std::vector<int64_t> prompt, int64_t new_tokens) {
      GenerationRequest request;
      request.prompt = std::move(prompt);
      request.max_new_tokens = new_tokens;
      return request;
    };
    // Eager first; with --cuda_graphs the same again with decode steps
    // replayed from CUDA graphs (Note [Decode graphs]), whose greedy tokens
    // must be the eager ones.
    std::vector<bool> modes = {false};
    if (options.cuda_graphs) modes.push_back(true);

    // Time to first token: one prefill step.
    {
      auto engine = engine_for(1, options.prompt_tokens + 1, options.prompt_tokens);
      if (!engine.ok()) return engine.status();
      for (int warm = 0; warm < 2; ++warm) {
        if (auto r = (*engine)->GenerateAll({greedy(Prompt(options.prompt_tokens, shape.vocab_size, warm), 1)});
            !r.ok()) {
          return r.status();
        }
      }
      const auto start = std::chrono::steady_clock::now();
      if (auto r = (*engine)->GenerateAll({greedy(Prompt(options.prompt_tokens, shape.vocab_size, 7), 1)}); !r.ok()) {
        return r.status();
      }
      absl::PrintF("time to first token, %d-token prompt: %.1f ms\n", options.prompt_tokens, 1e3 * Seconds(start));
    }
    // Batch-1 decoding after a 128-token prompt: the prefill step first, then
    // the decode steps timed.
    std::vector<int64_t> eager_tokens;
    std::vector<double> eager_logprobs;
    for (bool graphs : modes) {
      auto engine = engine_for(1, 128 + options.decode_tokens, 128, graphs);
      if (!engine.ok()) return engine.status();
      // Warm-up: every key length the timed run meets (with graphs: recorded).
      if (auto r = (*engine)->GenerateAll({greedy(prompt, options.decode_tokens)}); !r.ok()) return r.status();
      auto id = (*engine)->Submit(greedy(prompt, options.decode_tokens));
      if (!id.ok()) return id.status();
      if (auto first = (*engine)->Step(); !first.ok()) return first.status();  // the prefill
      const int64_t copied_before = streamer ? streamer->copied_bytes() : 0;
      const int64_t read_before = streamer && streamer->files() ? streamer->files()->read_bytes() : 0;
      const GenerationStats before = (*engine)->Stats();
      // The profiled window (--profile_decode): this mode's timed decode steps, the last mode's.
      const bool profiled = options.profile_decode && graphs == modes.back();
      if (profiled) compat::CudaProfilerStart();
      const auto start = std::chrono::steady_clock::now();
      int64_t decoded = 0;
      while (!(*engine)->Idle()) {
        auto step = (*engine)->Step();
        if (!step.ok()) return step.status();
        decoded += static_cast<int64_t>(step->size());
      }
      const double decode_seconds = Seconds(start);
      if (profiled) compat::CudaProfilerStop();
      const GenerationStats after = (*engine)->Stats();
      const double rate = decoded / decode_seconds;
      if (streamer) {
        absl::PrintF("streamed layers: %.2f GB copied per decode step, %.1f GB/s host to device\n",
                     (streamer->copied_bytes() - copied_before) / 1e9 / std::max<int64_t>(decoded, 1),
                     (streamer->copied_bytes() - copied_before) / 1e9 / decode_seconds);
        if (streamer->files()) {
          absl::PrintF("layer files: %.1f GB/s read from the drive\n",
                       (streamer->files()->read_bytes() - read_before) / 1e9 / decode_seconds);
        }
      }
      auto result = (*engine)->TakeResult(*id);
      if (!result.ok()) return result.status();
      std::string check;
      if (!graphs) {
        engine_rate = rate;
        eager_tokens = result->tokens;
        eager_logprobs = result->logprobs;
      } else {
        graph_rate = rate;
        check = result->tokens == eager_tokens ? "; tokens equal the eager run's" : "; TOKENS DIFFER from the eager run's";
        tokens_differ = tokens_differ || result->tokens != eager_tokens;
        // Where they part, and how close the two choices were there (random
        // weights in bf16 meet near-ties that one rounding flips).
        size_t same = 0;
        double largest = 0;
        while (same < eager_tokens.size() && same < result->tokens.size() && eager_tokens[same] == result->tokens[same]) {
          largest = std::max(largest, std::abs(eager_logprobs[same] - result->logprobs[same]));
          ++same;
        }
        if (same < eager_tokens.size() && same < result->tokens.size()) {
          check += absl::StrFormat(
              " from token %d (eager %d at log-probability %.4f, graphs %d at %.4f; before it the log-probabilities "
              "differ by at most %.2g)",
              same, eager_tokens[same], eager_logprobs[same], result->tokens[same], result->logprobs[same], largest);
        } else {
          check += absl::StrFormat(" (log-probabilities differ by at most %.2g)", largest);
        }
      }
      absl::PrintF("batch-1 decode (cached%s): %.1f tokens/s over %d tokens = %.0f%% of the roofline%s\n",
                   graphs ? ", CUDA graphs" : "", rate, decoded, 100 * rate / roofline, check);
      const double per_token_ms = 1e3 / std::max<int64_t>(decoded, 1);
      absl::PrintF("  per token: %.3f ms in the forward (launch, device, logits back), %.3f ms choosing the token on the host\n",
                   (after.forward_seconds - before.forward_seconds) * per_token_ms,
                   (after.choosing_seconds - before.choosing_seconds) * per_token_ms);
    }
    // Continuous batching: --batch requests submitted at once.
    std::vector<std::vector<int64_t>> eager_batch;
    for (bool graphs : modes) {
      if (options.batch == 0) break;
      const int64_t positions = options.batch * (options.batch_prompt_tokens + options.batch_new_tokens);
      auto engine = engine_for(options.batch, positions, 2048, graphs);
      if (!engine.ok()) return engine.status();
      std::vector<GenerationRequest> requests;
      for (int64_t i = 0; i < options.batch; ++i) {
        requests.push_back(
            greedy(Prompt(options.batch_prompt_tokens, shape.vocab_size, 100 + i), options.batch_new_tokens));
      }
      // Warm-up: the whole batch once (with graphs: each batch size and key
      // length the timed run meets is recorded).
      if (auto r = (*engine)->GenerateAll(requests); !r.ok()) return r.status();
      const auto start = std::chrono::steady_clock::now();
      auto results = (*engine)->GenerateAll(requests);
      if (!results.ok()) return results.status();
      const double seconds = Seconds(start);
      int64_t generated = 0;
      std::vector<std::vector<int64_t>> tokens;
      for (const auto& r : *results) {
        generated += static_cast<int64_t>(r.tokens.size());
        tokens.push_back(r.tokens);
      }
      std::string check;
      if (!graphs) {
        eager_batch = tokens;
      } else {
        int64_t same = 0;
        double first_difference = 0;  // mean index of each request's first different token
        for (size_t i = 0; i < tokens.size(); ++i) {
          same += tokens[i] == eager_batch[i] ? 1 : 0;
          size_t t = 0;
          while (t < tokens[i].size() && t < eager_batch[i].size() && tokens[i][t] == eager_batch[i][t]) ++t;
          first_difference += static_cast<double>(t) / static_cast<double>(tokens.size());
        }
        check = absl::StrFormat("; %d of %d requests' tokens equal the eager run's (the first difference at token %.1f on average)",
                                same, tokens.size(), first_difference);
      }
      absl::PrintF(
          "batch %d (continuous batching%s, %d-token prompts, %d new each): %.1f generated tokens/s, %.2f s%s\n",
          options.batch, graphs ? ", CUDA graphs" : "", options.batch_prompt_tokens, options.batch_new_tokens,
          generated / seconds, seconds, check);
      const GenerationStats stats = (*engine)->Stats();
      absl::PrintF("  cache %.2f GB in %d blocks; %d steps, %d replayed from %d recorded graphs\n",
                   stats.cache_bytes / 1e9, stats.cache_blocks, stats.steps, stats.graphed_steps,
                   stats.graphs_recorded);
    }
  }
  // The reference: the whole sequence again for every token.
  {
    torch::NoGradGuard no_grad;
    std::vector<int64_t> sequence = prompt;
    auto once = [&] {
      torch::Tensor logits = model->forward(torch::tensor(sequence, torch::kLong).view({1, -1}).to(device))[0][-1];
      sequence.push_back(logits.argmax().item<int64_t>());
    };
    once();  // warm-up
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < options.reference_tokens; ++i) once();
    const double rate = options.reference_tokens / Seconds(start);
    absl::PrintF("reference, uncached (whole sequence per token): %.1f tokens/s; cached / reference = %.1fx\n", rate,
                 engine_rate / rate);
    if (options.cuda_graphs) {
      absl::PrintF("CUDA graphs / eager, batch-1 decode: %.2fx\n", graph_rate / engine_rate);
    }
  }
  {
    torch::NoGradGuard no_grad;
    PrintGreedyChoiceTimes(torch::TensorOptions().dtype(*dtype).device(device), shape.vocab_size, options.batch);
  }
  // In fp32 the rounding is too fine for near-ties to flip: the tokens must agree.
  if (tokens_differ && options.dtype == "float32") {
    return absl::InternalError("batch-1 greedy tokens with CUDA graphs differ from the eager run's in float32");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace dslaunch::runtime

int main(int argc, char** argv) {
  dslaunch::runtime::Options options;
  dslaunch::FlagTable flags("generation_bench", "generation_bench [flags]");
  flags.String("--shape", &options.shape, "SHAPE", "the model's shape", {"7b", "tiny"})
      .String("--device", &options.device, "DEVICE", "cpu, cuda or cuda:N")
      .String("--dtype", &options.dtype, "DTYPE", "weights and compute", {"float32", "bfloat16", "float16"})
      .Int("--prompt_tokens", &options.prompt_tokens, "N", "prompt of the time-to-first-token figure", {1, 1 << 20})
      .Int("--decode_tokens", &options.decode_tokens, "N", "tokens of the batch-1 decode figure", {1, 1 << 20})
      .Int("--batch", &options.batch, "N", "requests of the continuous-batching figure (0: skip)", {0, 1 << 16})
      .Int("--batch_prompt_tokens", &options.batch_prompt_tokens, "N", "each batched request's prompt", {1, 1 << 20})
      .Int("--batch_new_tokens", &options.batch_new_tokens, "N", "each batched request's new tokens", {1, 1 << 20})
      .Int("--reference_tokens", &options.reference_tokens, "N", "tokens of the uncached reference", {1, 1 << 20})
      .Double("--hbm_tb_per_s", &options.hbm_tb_per_s, "TB/S", "memory bandwidth of the roofline", {0, 100, true})
      .String("--key_length_multiples", &options.key_length_multiples, "N,N",
              "pad attention's key length to a multiple of N (GenerationEngineOptions); each N in turn")
      .Bool("--fused_kernels", &options.fused_kernels,
            "the CUDA kernels for RMSNorm, RoPE, SwiGLU, paged decode attention and decode products")
      .Bool("--int8", &options.int8, "weight-only int8 projections (Note [Int8 weights]); no PyTorch counterpart here")
      .Bool("--cuda_graphs", &options.cuda_graphs,
            "also measure batch-1 and batched decoding with CUDA graphs, checking their tokens against eager")
      .Bool("--profile_decode", &options.profile_decode,
            "only the timed batch-1 decode steps (with graphs: the graphed ones) between cudaProfilerStart and "
            "Stop, for ncu --profile-from-start off")
      .String("--offload_params", &options.offload_params, "DEVICE",
              "ZeRO-Inference: cpu streams the decoder layers from pinned host memory (Note [Streamed layer weights]), "
              "nvme from files under --nvme_path",
              {"none", "cpu", "nvme"})
      .String("--nvme_path", &options.nvme_path, "DIR", "with --offload_params nvme: the folder of the layers' files")
      .Double("--drive_gb_per_s", &options.drive_gb_per_s, "GB/S",
              "with --offload_params nvme: the drive's read rate, the roofline (0: PCIe's)", {0, 1000, true})
      .Double("--cuda_memory_limit_gb", &options.cuda_memory_limit_gb, "G",
              "cap LibTorch's CUDA allocator (a smaller GPU); 0: no cap", {0, 1 << 20, true})
      .Double("--pcie_gb_per_s", &options.pcie_gb_per_s, "GB/S", "host-to-device bandwidth of the streamed roofline",
              {0, 1000, true});
  std::vector<std::string> args(argv + 1, argv + argc);
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) {
    std::fprintf(stderr, "generation_bench: %s\n", std::string(parsed.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  // One line at a time, so a run cut short by a timeout still shows its figures.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (absl::Status status = dslaunch::runtime::Run(options); !status.ok()) {
    std::fprintf(stderr, "generation_bench: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

// dsserve: an OpenAI-compatible server for a Hugging Face model folder
// (Note [OpenAI-compatible serving], runtime/serve/openai_server.h).
//
//   dsserve --model DIR [--adapter DIR | --checkpoint DIR [--checkpoint_tag TAG]] [--listen HOST:PORT] [--served_model_name NAME]
//           [--chat_template FILE(.jinja|.yaml)] [--tool_call_parser hermes|llama3_json]
//           [--api_key_file FILE] [--dtype ...] [--device ...]
//           [--max_sequences N] [--max_tokens_per_step N] [--cache_positions N] [--max_queue N]
//           [--cuda_graphs] [--fused_kernels] [--int8] [--offload_params none|cpu|nvme [--nvme_path DIR]]
//
// Start: the model is loaded, the logit probe runs (Note [Probe logits]: a
// mismatch refuses to serve), the address is bound, then one line
//   dsserve: serving 'NAME' on http://HOST:PORT ...
// is printed: a script waits for it. SIGINT or SIGTERM stops accepting,
// ends the requests in flight (503) and exits 0. Under dslaunch with N ranks
// (`dslaunch --num_gpus N dsserve ...`) the model is split over the N as
// tensor parallelism; rank 0 serves and the others follow its turns (Note
// [Tensor-parallel serving]) and leave when it stops.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/auth_token.h"
#include "common/flag_table.h"
#include "common/net_address.h"
#include "runtime/data/instruction_format.h"
#include "runtime/fs/path.h"
#include "runtime/generate/cached_forward_probe.h"
#include "runtime/generate/generation_engine.h"
#include "runtime/generate/generation_model.h"
#include "runtime/generate/generation_ranks.h"
#include "runtime/serve/folder_chat_template.h"
#include "runtime/serve/tool_call_parser.h"
#include "runtime/serve/openai_server.h"
#include "runtime/serve/serving_loop.h"
#include "runtime/serve/serving_metrics.h"
#include "runtime/serve/serving_turns.h"
#include "runtime/tokenizer/model_tokenizer.h"

namespace dslaunch::runtime {
namespace {

struct Options {
  GenerationModelOptions model;  // --model, --adapter, --checkpoint, ... (AddGenerationModelFlags)
  int64_t local_rank = -1;
  std::string listen = "127.0.0.1:8000";
  std::string served_model_name;
  std::string chat_template;
  std::string tool_call_parser;  // empty: none (Note [Tool calls])
  std::string api_key_file;
  int64_t max_sequences = 64;
  int64_t max_tokens_per_step = 512;
  int64_t cache_positions = 1 << 16;
  int64_t block_size = 16;
  int64_t key_length_multiple = 128;
  bool cuda_graphs = false;
  int64_t max_queue = 256;
  int64_t max_connections = 256;
  int64_t default_max_tokens = 16;
};

// The probe prompt: a fixed sentence in the folder's own tokens (bos first
// where the model adds it), cut to fit the context.
std::vector<int64_t> ProbeTokens(const Tokenizer& tokenizer, int64_t context, int64_t vocab) {
  std::vector<int64_t> tokens;
  if (tokenizer.bos_id() >= 0) tokens.push_back(tokenizer.bos_id());
  for (int32_t id : tokenizer.Encode("The quick brown fox jumps over the lazy dog; 0123456789 (probe).")) {
    tokens.push_back(id);
  }
  for (int64_t i = 0; static_cast<int64_t>(tokens.size()) < 8; ++i) tokens.push_back(i % vocab);
  if (static_cast<int64_t>(tokens.size()) > std::min<int64_t>(context, 32)) tokens.resize(std::min<int64_t>(context, 32));
  return tokens;
}

absl::Status Run(const Options& options) {
  auto address = ParseHostPort(options.listen, "--listen");
  if (!address.ok()) return address.status();
  OpenAiServerOptions server_options;
  server_options.host = address->host;
  server_options.port = address->port;
  server_options.model_name = options.served_model_name.empty()
                                  ? BaseName(LexicallyNormal(options.model.model))
                                  : options.served_model_name;
  if (server_options.model_name.empty()) server_options.model_name = options.model.model;
  server_options.default_max_tokens = options.default_max_tokens;
  server_options.max_connections = static_cast<int>(options.max_connections);
  if (!options.api_key_file.empty()) {
    auto key = ReadTokenFile(options.api_key_file);
    if (!key.ok()) return absl::Status(key.status().code(), absl::StrCat("--api_key_file: ", key.status().message()));
    server_options.api_key = *key;
  }
  // Note [The folder's chat template]: a .jinja file or the YAML form when
  // given, else the folder's own.
  std::string chat_template_source = "none";
  if (absl::EndsWith(options.chat_template, ".jinja")) {
    auto chat_template = ReadJinjaChatTemplateFile(options.chat_template, options.model.model);
    if (!chat_template.ok()) return chat_template.status();
    server_options.jinja_chat_template = std::move(*chat_template);
    chat_template_source = options.chat_template;
  } else if (!options.chat_template.empty()) {
    auto chat_template = ReadChatTemplateFile(options.chat_template);
    if (!chat_template.ok()) return chat_template.status();
    server_options.chat_template = *chat_template;
    chat_template_source = options.chat_template;
  } else {
    auto chat_template = ReadFolderChatTemplate(options.model.model);
    if (!chat_template.ok()) return chat_template.status();
    if (chat_template->has_value()) {
      server_options.jinja_chat_template = std::move(**chat_template);
      chat_template_source = "the folder's";
    }
  }
  if (!options.tool_call_parser.empty()) {
    auto format = ParseToolCallFormat(options.tool_call_parser);
    if (!format.ok()) return format.status();
    if (!server_options.jinja_chat_template) {
      return absl::InvalidArgumentError(
          "--tool_call_parser: tools reach the model through a Jinja chat template (the folder's, or --chat_template "
          "FILE.jinja); this server has none");
    }
    server_options.tool_call_parser = *format;
  }
  auto stop_tokens = ReadGenerationStopTokens(options.model.model);
  if (!stop_tokens.ok()) return stop_tokens.status();
  server_options.stop_tokens = *stop_tokens;
  auto tokenizer = LoadModelTokenizer(options.model.model);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(), absl::StrCat("dsserve needs the folder's tokenizer: ",
                                                                tokenizer.status().message()));
  }
  // Note [Tool calls]: answers are decoded without special tokens, so a
  // <tool_call> that is one would never reach the parser.
  if (server_options.tool_call_parser == ToolCallFormat::kHermes) {
    const std::optional<int32_t> tag = (*tokenizer)->TokenId("<tool_call>");
    if (tag && (*tokenizer)->Decode({*tag}).find("<tool_call>") == std::string::npos) {
      return absl::InvalidArgumentError(
          "--tool_call_parser hermes: this tokenizer marks <tool_call> as a special token, which dsserve leaves out "
          "of an answer's text, so no call could be read; not supported for this model");
    }
  }
  // Note [Tensor-parallel serving]: started by dslaunch with N ranks, the
  // model is split over the N; rank 0 serves HTTP, the others follow its turns.
  auto ranks = StartGenerationRanks(options.model.device, options.local_rank);
  if (!ranks.ok()) return ranks.status();
  const TensorParallelGroup& tensor_parallel = ranks->tensor_parallel;
  const std::string& device_name = ranks->device;
  GenerationModelOptions model_options = options.model;
  model_options.tensor_parallel = tensor_parallel;
  model_options.device = device_name;
  auto model = LoadGenerationModel(model_options);
  if (!model.ok()) return model.status();
  if (tensor_parallel.rank == 0 && (*model)->layer_residency() != nullptr) {
    std::fprintf(stderr, "dsserve: %s\n", (*model)->layer_residency()->Describe().c_str());
  }
  const LlamaOptions& llama = (*model)->options();
  for (int64_t id : server_options.stop_tokens) {
    if (id >= llama.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(options.model.model, "/generation_config.json: eos_token_id ", id,
                                                     " is not below the model's vocabulary size ", llama.vocab_size));
    }
  }
  if ((*tokenizer)->vocab_size() > llama.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer of ", options.model.model, " has ", (*tokenizer)->vocab_size(),
                                                   " tokens, more than the model's vocabulary (", llama.vocab_size, ")"));
  }
  // Note [Probe logits]: the generation path agrees with the training forward, or nothing is served.
  auto probe = ProbeCachedForward(*model, ProbeTokens(**tokenizer, llama.rope.max_position_embeddings, llama.vocab_size));
  if (!probe.ok()) return probe.status();

  GenerationEngineOptions engine_options;
  engine_options.max_sequences = options.max_sequences;
  engine_options.max_tokens_per_step = options.max_tokens_per_step;
  engine_options.cache_positions = options.cache_positions;
  engine_options.block_size = options.block_size;
  engine_options.key_length_multiple = options.key_length_multiple;
  engine_options.cuda_graphs = options.cuda_graphs;
  // Note [Constrained output]: every rank (followers sample alike).
  engine_options.vocabulary = std::make_shared<const TokenVocabulary>(TokenBytesOf(**tokenizer));
  auto engine = GenerationEngine::Create(*model, engine_options);
  if (!engine.ok()) return engine.status();
  const GenerationStats cache = (*engine)->Stats();
  if (tensor_parallel.split() && tensor_parallel.rank != 0) {
    return FollowServingTurns(**engine, *tensor_parallel.comm, torch::Device(device_name));
  }
  std::optional<TurnPublisher> publisher;
  if (tensor_parallel.split()) publisher.emplace(tensor_parallel.comm, torch::Device(device_name));

  ServingMetrics metrics;
  ServingLoopOptions loop_options;
  loop_options.max_queue = options.max_queue;
  if (publisher) loop_options.publisher = &*publisher;
  ServingLoop loop(std::move(*engine), loop_options, &metrics);
  auto server = OpenAiServer::Bind(server_options, loop, **tokenizer, metrics);
  if (!server.ok()) return server.status();
  loop.Start();

  // SIGINT/SIGTERM: stop accepting, end what is in flight.
  std::thread signals([&loop, &server] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int signal_number = 0;
    sigwait(&set, &signal_number);
    (*server)->Stop();
    loop.Stop();
  });
  signals.detach();

  absl::PrintF("dsserve: serving '%s' on http://%s (probe: %d positions, max |logit difference| %.3g, allowed "
               "%.3g; key/value cache %d blocks of %d positions, %.1f MiB; chat template: %s)\n",
               server_options.model_name, HostPort{address->host, (*server)->port()}.ToString(), probe->positions,
               probe->max_abs_difference, probe->tolerance, cache.cache_blocks, options.block_size,
               static_cast<double>(cache.cache_bytes) / (1 << 20), chat_template_source);
  std::fflush(stdout);
  (*server)->Serve();
  loop.Stop();
  absl::PrintF("dsserve: stopped\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace dslaunch::runtime

int main(int argc, char** argv) {
  using dslaunch::runtime::Options;
  // Signals go to the signal-handling thread only (blocked here, before any
  // thread starts); a client that went away must not kill the server.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Options options;
  dslaunch::FlagTable flags("dsserve", "dsserve --model DIR [--listen HOST:PORT] [flags]");
  dslaunch::runtime::AddGenerationModelFlags(flags, &options.model, &options.local_rank);
  flags.String("--listen", &options.listen, "HOST:PORT", "the address to serve on (port 0: a free one)")
      .String("--served_model_name", &options.served_model_name, "NAME",
              "the model's name in the API (default: the folder's name)")
      .String("--chat_template", &options.chat_template, "FILE",
              "the chat template of /v1/chat/completions: a .jinja file (as tokenizer_config.json's chat_template), "
              "or YAML (system/user/assistant prefix and suffix, as the job file's data.chat_template); default: the "
              "model folder's own")
      .String("--tool_call_parser", &options.tool_call_parser, "FORMAT",
              "read tool calls (OpenAI's tools) out of chat answers in this form: hermes (<tool_call> JSON "
              "</tool_call>: Hermes, Qwen) or llama3_json (Llama 3.1+); default: none, and a request with tools "
              "answers 400",
              {"hermes", "llama3_json"})
      .String("--api_key_file", &options.api_key_file, "FILE",
              "require 'Authorization: Bearer <key>' on /v1/ routes; the key is the file's first line")
      .Int("--max_sequences", &options.max_sequences, "N", "requests generating at once", {1, 1 << 16})
      .Int("--max_tokens_per_step", &options.max_tokens_per_step, "N",
           "tokens of one forward; long prompts are split across steps", {1, 1 << 24})
      .Int("--cache_positions", &options.cache_positions, "N", "positions of the paged key/value cache",
           {1, int64_t{1} << 32})
      .Int("--block_size", &options.block_size, "N", "positions per cache block", {1, 1 << 16})
      .Int("--key_length_multiple", &options.key_length_multiple, "N",
           "attention's key length padded to a multiple of N (fewer shapes)", {1, 1 << 16})
      .Bool("--cuda_graphs", &options.cuda_graphs,
            "decode steps as CUDA graph replays (a CUDA --device; not with tensor parallelism)")
      .Int("--max_queue", &options.max_queue, "N", "requests waiting beyond --max_sequences; more get 429", {0, 1 << 24})
      .Int("--max_connections", &options.max_connections, "N",
           "connections served at once (a streaming response holds one)", {1, 1 << 16})
      .Int("--default_max_tokens", &options.default_max_tokens, "N",
           "max_tokens of a /v1/completions request that gives none (OpenAI's default is 16)", {1, 1 << 24});
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::Status parsed = flags.Parse(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "dsserve: %s\n", std::string(parsed.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  if (flags.version_requested()) {
    std::printf("%s\n", flags.Version().c_str());
    return 0;
  }
  std::string problem = dslaunch::runtime::GenerationModelFlagsProblem(options.model);
  if (!flags.positionals().empty()) problem = absl::StrCat("unexpected argument '", flags.positionals()[0], "'");
  if (options.max_tokens_per_step < options.max_sequences) {
    problem = absl::StrCat("--max_tokens_per_step (", options.max_tokens_per_step, ") must be >= --max_sequences (",
                           options.max_sequences, "): every running request decodes a token each step");
  }
  if (!problem.empty()) {
    std::fprintf(stderr, "dsserve: %s (see --help)\n", problem.c_str());
    return 2;
  }
  absl::Status status = dslaunch::runtime::Run(options);
  if (!status.ok()) {
    std::fprintf(stderr, "dsserve: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

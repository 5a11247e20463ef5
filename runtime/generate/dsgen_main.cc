// dsgen: try a Hugging Face model folder by continuing a prompt.
//
//   dsgen --model DIR [--adapter DIR | --checkpoint DIR [--checkpoint_tag TAG]] (--prompt TEXT | --prompt_ids 1,2,3) [--max_new_tokens N]
//         [--greedy | --temperature T [--top_k K] [--top_p P] [--seed S]] [--repetition_penalty P]
//         [--print_ids] [--print_logprobs] [--dump_logits FILE] [--dtype float32|bfloat16|float16]
//         [--json | --choice A|B | --json_schema FILE | --structural_tag FILE]
//         [--device cpu|cuda[:N]] [--cuda_graphs] [--fused_kernels] [--int8] [--offload_params none|cpu|nvme [--nvme_path DIR]]
//   dsgen --model DIR --prompt_ids 1,2,3 --max_new_tokens 0 --dump_gradients FILE
//         [--masked_prefix N] [--checkpointed_layers N]
//
// With --prompt_ids, prints the new token ids on one line (with
// --print_logprobs one line per token: id and its log-probability). With
// --prompt, the folder's own tokenizer encodes the text (bos where the model
// adds it), the continuation stops at eos and is printed as text (after its
// ids with --print_ids). --dump_logits writes the logits of every
// prompt position as F32 tensor "logits" [positions, vocab] in a safetensors
// file (what tests/hf/ compares with an independent implementation).
// --dump_gradients treats the prompt as one training record instead (each
// position predicts the next token, the first --masked_prefix targets are
// -100 as an instruction prompt's are), runs the loss the trainer runs
// (ModelInterface::BatchLoss) and its backward, and writes the F32 tensor
// "loss" and every parameter's gradient under its Hugging Face name: what
// tests/hf/ checks against the reference's autograd.
// Generation runs on the continuous-batching engine (generation_engine.h):
// the prompt in one step, then one cached decode per token. Under dslaunch
// with N ranks (`dslaunch --num_gpus N dsgen ...`) the model is split over
// the N as tensor parallelism (Note [Tensor-parallel generation]): the same
// tokens as one rank; rank 0 prints.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/flag_table.h"
#include "runtime/fs/file_system.h"
#include "runtime/generate/generation_engine.h"
#include "runtime/generate/generation_model.h"
#include "runtime/generate/generation_ranks.h"
#include "runtime/generate/json_schema.h"
#include "runtime/generate/sampling.h"
#include "runtime/generate/structural_tag_automaton.h"
#include "runtime/hf/safetensors_stream_writer.h"
#include "runtime/model/llama.h"
#include "runtime/tokenizer/json_value.h"
#include "runtime/tokenizer/model_tokenizer.h"

namespace dslaunch::runtime {
namespace {

struct Options {
  GenerationModelOptions model;  // --model, --adapter, --checkpoint, ... (AddGenerationModelFlags)
  int64_t local_rank = -1;
  std::string prompt_ids;
  std::string prompt;
  int64_t max_new_tokens = 32;
  bool greedy = false;
  double temperature = 0;
  double top_p = 1.0;
  int64_t top_k = 0;
  double repetition_penalty = 1.0;
  int64_t seed = 0;
  bool print_logprobs = false;
  bool print_ids = false;
  bool cuda_graphs = false;
  std::string dump_logits;
  std::string dump_gradients;
  int64_t masked_prefix = 0;
  // Note [Constrained output]: one JSON object, or one of the choices
  // ('|'-separated).
  bool json = false;
  std::string choice;
  std::string json_schema;  // a file holding a JSON schema (Note [JSON schemas for constrained output])
  std::string structural_tag;  // a file holding a structural tag (Note [Structural tags])
};

// --json_schema FILE: the schema, checked (an error names the file and the
// schema's keyword), as compact text.
absl::StatusOr<std::string> ReadSchemaFile(const std::string& path) {
  auto text = FileSystem::Default().ReadFile(path, /*max_bytes=*/int64_t{1} << 20);
  if (!text.ok()) return text.status();
  auto schema = CompileJsonSchemaText(*text, path);
  if (!schema.ok()) return schema.status();
  return (*schema)->text();
}

// --structural_tag FILE: vLLM's structural_tag (its "type" may be left
// out), checked, errors naming the file and the place.
absl::StatusOr<OutputConstraint> ReadStructuralTagFile(const std::string& path) {
  auto text = FileSystem::Default().ReadFile(path, /*max_bytes=*/int64_t{1} << 20);
  if (!text.ok()) return text.status();
  auto value = ParseJson(*text, path);
  if (!value.ok()) return value.status();
  auto spec = ReadStructuralTag(*value, path);
  if (!spec.ok()) return spec.status();
  return OutputConstraint::StructuralTag(std::move(spec->structures), std::move(spec->triggers));
}

absl::StatusOr<std::vector<int64_t>> ParseIds(const std::string& text) {
  std::vector<int64_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(part, &id) || id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--prompt_ids: '", part, "' is not a token id"));
    }
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError("--prompt_ids: no token ids");
  return ids;
}

// Every prompt id within the model's vocabulary; the error names where the
// ids came from.
absl::Status CheckIdsInVocabulary(const std::vector<int64_t>& ids, int64_t vocab, const std::string& source) {
  for (int64_t id : ids) {
    if (id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, " gives id ", id, ", outside the model's vocabulary (", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteTensors(FileSystem& fs, const std::string& path,
                          const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  std::vector<SafetensorsEntryInfo> entries;
  for (const auto& [name, tensor] : tensors) {
    SafetensorsEntryInfo entry;
    entry.name = name;
    entry.dtype = SafetensorsDtype::kF32;
    entry.shape = tensor.sizes().vec();
    entries.push_back(std::move(entry));
  }
  auto writer = SafetensorsStreamWriter::Create(fs, path, entries, {});
  if (!writer.ok()) return writer.status();
  for (const auto& [name, tensor] : tensors) {
    if (absl::Status s = (*writer)->Append(tensor.detach().to(torch::kCPU, torch::kFloat)); !s.ok()) return s;
  }
  return (*writer)->Finish();
}

// One training record's loss and gradients (--dump_gradients).
absl::Status DumpGradients(FileSystem& fs, const Options& options, Llama& model, const std::vector<int64_t>& ids,
                           torch::Device device) {
  const int64_t t = static_cast<int64_t>(ids.size());
  if (t < 2) return absl::InvalidArgumentError("--dump_gradients: the prompt needs at least 2 tokens");
  if (options.masked_prefix >= t - 1) {
    return absl::InvalidArgumentError(absl::StrCat("--masked_prefix ", options.masked_prefix, " masks every one of the ",
                                                   t - 1, " targets"));
  }
  std::vector<int64_t> targets(ids.begin() + 1, ids.end());
  targets.push_back(-100);
  for (int64_t i = 0; i < options.masked_prefix; ++i) targets[i] = -100;
  TokenBatch batch;
  batch.tokens = torch::tensor(ids, torch::kLong).view({1, -1}).to(device);
  batch.targets = torch::tensor(targets, torch::kLong).view({1, -1}).to(device);
  model->train();
  torch::Tensor loss = model->BatchLoss(batch);
  loss.backward();
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  tensors.emplace_back("loss", loss.detach().reshape({1}));
  for (const auto& item : model->named_parameters()) {
    if (!item.value().grad().defined()) {
      return absl::InternalError(absl::StrCat("--dump_gradients: parameter ", item.key(), " got no gradient"));
    }
    tensors.emplace_back(item.key(), item.value().grad());
  }
  if (absl::Status s = WriteTensors(fs, options.dump_gradients, tensors); !s.ok()) return s;
  absl::PrintF("loss %.8f\n", loss.item<double>());
  return absl::OkStatus();
}

absl::Status Run(const Options& options) {
  FileSystem& fs = FileSystem::Default();
  auto device = ParseGenerationDevice(options.model.device);
  if (!device.ok()) return device.status();
  // --prompt TEXT: the folder's own tokenizer (runtime/tokenizer/), with
  // bos where the model adds it; the continuation stops at eos.
  std::unique_ptr<Tokenizer> tokenizer;
  absl::StatusOr<std::vector<int64_t>> ids = std::vector<int64_t>{};
  if (!options.prompt.empty()) {
    auto loaded = LoadModelTokenizer(options.model.model);
    if (!loaded.ok()) return loaded.status();
    tokenizer = std::move(*loaded);
    if (tokenizer->adds_bos() && tokenizer->bos_id() >= 0) ids->push_back(tokenizer->bos_id());
    for (int32_t id : tokenizer->Encode(options.prompt)) ids->push_back(id);
  } else {
    ids = ParseIds(options.prompt_ids);
  }
  if (!ids.ok()) return ids.status();

  // Note [Tensor-parallel generation]: started by dslaunch with N ranks, the
  // model is split over all N (one rank bootstrap: device, groups,
  // heartbeats); every rank generates, rank 0 prints.
  auto ranks = StartGenerationRanks(options.model.device, options.local_rank);
  if (!ranks.ok()) return ranks.status();
  if (ranks->world_size > 1 && (!options.dump_logits.empty() || !options.dump_gradients.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dump_logits and --dump_gradients run on one rank, not ", ranks->world_size));
  }
  const bool prints = ranks->rank == 0;

  GenerationModelOptions model_options = options.model;
  model_options.device = ranks->device;
  model_options.tensor_parallel = ranks->tensor_parallel;
  if (!options.dump_gradients.empty() && model_options.offload_params != "none") {
    return absl::InvalidArgumentError("--dump_gradients runs the training forward: not with --offload_params");
  }
  auto loaded = LoadGenerationModel(model_options);
  if (!loaded.ok()) return loaded.status();
  Llama model = *loaded;
  if (prints && model->layer_residency() != nullptr) {
    std::fprintf(stderr, "dsgen: %s\n", model->layer_residency()->Describe().c_str());
  }
  const std::string source =
      tokenizer ? absl::StrCat("the tokenizer of ", options.model.model) : std::string("--prompt_ids");
  if (absl::Status in = CheckIdsInVocabulary(*ids, model->options().vocab_size, source); !in.ok()) return in;
  if (!options.dump_gradients.empty()) return DumpGradients(fs, options, model, *ids, *device);
  torch::NoGradGuard no_grad;

  if (!options.dump_logits.empty()) {
    torch::Tensor logits = model->forward(torch::tensor(*ids, torch::kLong).view({1, -1}).to(*device))[0];
    if (absl::Status s = WriteTensors(fs, options.dump_logits, {{"logits", logits}}); !s.ok()) return s;
  }
  // Note [Continuous batching]: one request, its prompt in one step, then a
  // cached decode per token.
  std::vector<SampledToken> generated;
  if (options.max_new_tokens > 0) {
    GenerationRequest request;
    request.prompt = *ids;
    request.max_new_tokens = options.max_new_tokens;
    request.sampling.greedy = options.temperature <= 0;
    request.sampling.temperature = options.temperature > 0 ? options.temperature : 1.0;
    request.sampling.top_k = options.top_k;
    request.sampling.top_p = options.top_p;
    request.sampling.repetition_penalty = options.repetition_penalty;
    request.sampling.seed = static_cast<uint64_t>(options.seed);
    if (tokenizer && tokenizer->eos_id() >= 0) request.stop_tokens = {tokenizer->eos_id()};
    GenerationEngineOptions engine_options;
    if (options.json || !options.choice.empty() || !options.json_schema.empty() || !options.structural_tag.empty()) {
      // Note [Constrained output] (flags checked in main: --prompt gives the tokenizer).
      if (options.json) {
        request.constraint.kind = OutputConstraint::Kind::kJsonObject;
      } else if (!options.choice.empty()) {
        request.constraint.kind = OutputConstraint::Kind::kChoice;
        request.constraint.choices = absl::StrSplit(options.choice, '|');
      } else if (!options.json_schema.empty()) {
        auto text = ReadSchemaFile(options.json_schema);
        if (!text.ok()) return text.status();
        request.constraint.kind = OutputConstraint::Kind::kJsonSchema;
        request.constraint.schema = *std::move(text);
      } else {
        auto tag = ReadStructuralTagFile(options.structural_tag);
        if (!tag.ok()) return tag.status();
        request.constraint = *std::move(tag);
      }
      engine_options.vocabulary = std::make_shared<const TokenVocabulary>(TokenBytesOf(*tokenizer));
    }
    engine_options.max_sequences = 1;
    engine_options.max_tokens_per_step = std::max<int64_t>(1, static_cast<int64_t>(ids->size()));
    engine_options.cache_positions = static_cast<int64_t>(ids->size()) + options.max_new_tokens;
    engine_options.cuda_graphs = options.cuda_graphs;
    auto engine = GenerationEngine::Create(model, engine_options);
    if (!engine.ok()) return engine.status();
    auto results = (*engine)->GenerateAll({std::move(request)});
    if (!results.ok()) return results.status();
    for (size_t i = 0; i < (*results)[0].tokens.size(); ++i) {
      generated.push_back(SampledToken{(*results)[0].tokens[i], (*results)[0].logprobs[i]});
    }
  }
  if (!prints) return absl::OkStatus();
  std::vector<std::string> out;
  for (const SampledToken& token : generated) {
    if (options.print_logprobs) {
      absl::PrintF("%d %.6f\n", token.id, token.logprob);
    } else {
      out.push_back(absl::StrCat(token.id));
    }
  }
  if (tokenizer) {
    // Text in, text out: the continuation as it reads after the prompt
    // (DecodeAfter; eos and other special tokens left out); the ids too
    // with --print_ids.
    std::vector<int32_t> continuation;
    for (const SampledToken& token : generated) continuation.push_back(static_cast<int32_t>(token.id));
    if (options.print_ids && !options.print_logprobs) absl::PrintF("%s\n", absl::StrJoin(out, " "));
    absl::PrintF("%s\n", DecodeAfter(*tokenizer, DecodingContext(*ids), continuation));
    return absl::OkStatus();
  }
  if (!options.print_logprobs) absl::PrintF("%s\n", absl::StrJoin(out, " "));
  return absl::OkStatus();
}

}  // namespace
}  // namespace dslaunch::runtime

int main(int argc, char** argv) {
  using dslaunch::runtime::Options;
  Options options;
  dslaunch::FlagTable flags("dsgen", "dsgen --model DIR (--prompt TEXT | --prompt_ids 1,2,3) [flags]");
  dslaunch::runtime::AddGenerationModelFlags(flags, &options.model, &options.local_rank);
  flags.String("--prompt_ids", &options.prompt_ids, "IDS", "the prompt as comma-separated token ids")
      .String("--prompt", &options.prompt, "TEXT", "the prompt as text (needs the folder's tokenizer)")
      .Int("--max_new_tokens", &options.max_new_tokens, "N", "tokens to generate", {0, 1 << 20})
      .Bool("--greedy", &options.greedy, "always the most probable token (the default)")
      .Double("--temperature", &options.temperature, "T", "sample at this temperature instead of greedy",
              {0, 100, /*min_exclusive=*/true})
      .Double("--top_p", &options.top_p, "P", "with --temperature: sample from the top-p nucleus",
              {0, 1, /*min_exclusive=*/true})
      .Int("--top_k", &options.top_k, "K", "with --temperature: sample from the K most probable tokens (0: all)",
           {0, 1 << 30})
      .Double("--repetition_penalty", &options.repetition_penalty, "P",
              "divide a seen token's positive logit by P, multiply a negative one (1: off)",
              {0, 100, /*min_exclusive=*/true})
      .Int("--seed", &options.seed, "S", "seed of the sampling", {0, INT64_MAX})
      .Bool("--print_logprobs", &options.print_logprobs, "one line per new token: its id and log-probability")
      .Bool("--print_ids", &options.print_ids, "with --prompt: the new token ids too, on a line before the text")
      .Bool("--json", &options.json, "with --prompt: the continuation is one JSON object (OpenAI's json mode)")
      .String("--choice", &options.choice, "A|B|...",
              "with --prompt: the continuation is exactly one of these '|'-separated strings")
      .String("--json_schema", &options.json_schema, "FILE",
              "with --prompt: the continuation is JSON that validates against the schema in FILE (properties in "
              "the schema's order; a keyword it cannot hold output to is an error naming it)")
      .String("--structural_tag", &options.structural_tag, "FILE",
              "with --prompt: free text in which each trigger opens a structure whose JSON validates against its "
              "schema (vLLM's structural_tag: {\"structures\": [{\"begin\", \"schema\", \"end\"}], "
              "\"triggers\": [...]} in FILE)")
      .Bool("--cuda_graphs", &options.cuda_graphs,
            "decode steps as CUDA graph replays (a CUDA --device; not with tensor parallelism)")
      .String("--dump_logits", &options.dump_logits, "FILE",
              "write the prompt's logits [positions, vocab] as F32 tensor 'logits' in a safetensors file")
      .String("--dump_gradients", &options.dump_gradients, "FILE",
              "instead of generating: the prompt as one training record; write F32 'loss' and every parameter's "
              "gradient (Hugging Face names) in a safetensors file")
      .Int("--masked_prefix", &options.masked_prefix, "N",
           "with --dump_gradients: the first N targets carry no loss (-100), as an instruction prompt's",
           {0, 1 << 30})
      .Int("--checkpointed_layers", &options.model.checkpointed_layers, "N",
           "with --dump_gradients: recompute N evenly spaced layers in backward (activation checkpointing)",
           {0, 1 << 20});
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::Status parsed = flags.Parse(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "dsgen: %s\n", std::string(parsed.message()).c_str());
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
  if (options.prompt_ids.empty() == options.prompt.empty()) problem = "give one of --prompt_ids and --prompt";
  if (options.print_ids && options.prompt.empty()) problem = "--print_ids goes with --prompt (--prompt_ids prints ids)";
  const int forms = (options.json ? 1 : 0) + (options.choice.empty() ? 0 : 1) + (options.json_schema.empty() ? 0 : 1) +
                    (options.structural_tag.empty() ? 0 : 1);
  if (forms > 0 && options.prompt.empty()) {
    problem = absl::StrCat(options.json                     ? "--json"
                           : !options.choice.empty()        ? "--choice"
                           : !options.json_schema.empty()   ? "--json_schema"
                                                            : "--structural_tag",
                           " goes with --prompt: the form is text, read through the folder's tokenizer");
  }
  if (forms > 1) problem = "--json, --choice, --json_schema and --structural_tag exclude each other";
  if (options.greedy && options.temperature > 0) problem = "--greedy and --temperature exclude each other";
  if (options.top_p < 1.0 && options.temperature <= 0) problem = "--top_p needs --temperature (sampling)";
  if (options.top_k > 0 && options.temperature <= 0) problem = "--top_k needs --temperature (sampling)";
  if (!options.dump_gradients.empty() && options.max_new_tokens != 0) {
    problem = "--dump_gradients computes a training step instead of generating: give --max_new_tokens 0";
  }
  if (!options.dump_gradients.empty() && !options.model.adapter.empty()) {
    problem = "--adapter goes with generation and --dump_logits, not --dump_gradients";
  }
  if (options.dump_gradients.empty() && (options.masked_prefix != 0 || options.model.checkpointed_layers != 0)) {
    problem = "--masked_prefix and --checkpointed_layers go with --dump_gradients";
  }
  if (!problem.empty()) {
    std::fprintf(stderr, "dsgen: %s (see --help)\n", problem.c_str());
    return 2;
  }
  absl::Status status = dslaunch::runtime::Run(options);
  if (!status.ok()) {
    std::fprintf(stderr, "dsgen: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

#include "runtime/estimate/model_size.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/data/indexed_dataset_format.h"

namespace dslaunch::runtime {
namespace {

// The vocabulary a prepared dataset's header records (Note [Indexed dataset
// layout], data/indexed_dataset_format.h: vocab_size at byte 16), which is
// what a rank takes when model.vocab_size is 0; 0 when `prefix`.idx cannot
// be read here (not prepared yet, or on another host).
int64_t PreparedVocabulary(const std::string& prefix) {
  if (prefix.empty()) return 0;
  std::ifstream in(prefix + ".idx", std::ios::binary);
  char header[kIndexHeaderBytes] = {};
  if (!in.read(header, sizeof(header)) || std::memcmp(header, kIndexMagic, sizeof(kIndexMagic)) != 0) return 0;
  int64_t vocab = 0;
  std::memcpy(&vocab, header + 16, sizeof(vocab));  // little-endian, as this host
  return vocab > 0 ? vocab : 0;
}

// The byte tokenizer's ids: 256 bytes and eos (runtime/tokenizer/tokenizer.h).
constexpr int64_t kByteVocabulary = 257;
constexpr int64_t kDefaultSentencepieceVocabulary = 8000;

int64_t RoundUp(int64_t value, int64_t multiple) {
  return multiple <= 1 ? value : (value + multiple - 1) / multiple * multiple;
}

absl::StatusOr<int64_t> IntKey(const YAML::Node& root, const std::string& key, const std::string& path,
                               std::optional<int64_t> fallback) {
  const YAML::Node node = root[key];
  if (!node.IsDefined() || node.IsNull()) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " is missing"));
  }
  try {
    const int64_t value = node.as<int64_t>();
    if (value < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, ": ", value, " is negative"));
    return value;
  } catch (const YAML::Exception&) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, ": expected an integer"));
  }
}

absl::StatusOr<bool> BoolKey(const YAML::Node& root, const std::string& key, const std::string& path) {
  const YAML::Node node = root[key];
  if (!node.IsDefined() || node.IsNull()) return false;
  try {
    return node.as<bool>();
  } catch (const YAML::Exception&) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, ": expected true or false"));
  }
}

absl::StatusOr<std::string> StringKey(const YAML::Node& root, const std::string& key, const std::string& path,
                                      const std::string& fallback) {
  const YAML::Node node = root[key];
  if (!node.IsDefined() || node.IsNull()) return fallback;
  if (!node.IsScalar()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, ": expected a string"));
  return node.as<std::string>();
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A projection of one Llama layer, `copies` times (Mixtral's experts).
struct LayerProjection {
  std::string name;
  int64_t in, out, copies;
};

// Each projection of one Llama layer: attention's, then the MLP's, or with
// experts the router and every expert's w1, w2, w3
// (runtime/model/mixtral_expert.h).
std::vector<LayerProjection> LlamaProjections(const LlamaShape& s) {
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  std::vector<LayerProjection> projections = {
      {"q_proj", s.hidden, q, 1}, {"k_proj", s.hidden, kv, 1}, {"v_proj", s.hidden, kv, 1}, {"o_proj", q, s.hidden, 1}};
  if (s.experts > 0) {
    projections.push_back({"gate", s.hidden, s.experts, 1});  // the router
    projections.push_back({"w1", s.hidden, s.intermediate, s.experts});
    projections.push_back({"w2", s.intermediate, s.hidden, s.experts});
    projections.push_back({"w3", s.hidden, s.intermediate, s.experts});
  } else {
    projections.push_back({"gate_proj", s.hidden, s.intermediate, 1});
    projections.push_back({"up_proj", s.hidden, s.intermediate, 1});
    projections.push_back({"down_proj", s.intermediate, s.hidden, 1});
  }
  return projections;
}

}  // namespace

int64_t GptParameters(const GptShape& s) {
  const int64_t d = s.width;
  return s.vocab * d + s.sequence_length * d + s.layers * (12 * d * d + 13 * d) + 2 * d;
}

int64_t LlamaParameters(const LlamaShape& s) {
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  int64_t attention = s.hidden * q * 2 + s.hidden * kv * 2;
  if (s.attention_bias) attention += q + 2 * kv + s.hidden;
  else if (s.qkv_bias) attention += q + 2 * kv;
  int64_t mlp = 3 * s.hidden * s.intermediate;
  if (s.mlp_bias) mlp += 2 * s.intermediate + s.hidden;
  if (s.experts > 0) mlp = mlp * s.experts + s.hidden * s.experts;  // and the router
  const int64_t per_layer = attention + mlp + 2 * s.hidden;
  return s.vocab * s.hidden * (s.tied ? 1 : 2) + s.layers * per_layer + s.hidden;
}

absl::StatusOr<int64_t> LlamaLoraParameters(const LlamaShape& s, const LoraConfig& lora) {
  const bool all_linear = std::find(lora.target_modules.begin(), lora.target_modules.end(), "all-linear") !=
                          lora.target_modules.end();
  std::set<std::string> matched;
  int64_t per_layer = 0;
  std::vector<std::string> names;
  for (const LayerProjection& p : LlamaProjections(s)) {
    names.push_back(p.name);
    const bool take = all_linear ||
                      std::find(lora.target_modules.begin(), lora.target_modules.end(), p.name) != lora.target_modules.end();
    if (!take) continue;
    matched.insert(p.name);
    per_layer += p.copies * lora.r * (p.in + p.out);
  }
  int64_t head = 0;
  for (const std::string& target : lora.target_modules) {
    if (target == "all-linear" || matched.count(target) != 0) continue;
    if (target == "lm_head") {
      head = lora.r * (s.hidden + s.vocab);
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat("lora.target_modules: '", target,
                                                   "' matches no projection of this model (it has ",
                                                   absl::StrJoin(names, ", "), ", lm_head)"));
  }
  return s.layers * per_layer + head;
}

absl::StatusOr<LlamaShape> ParseLlamaShape(const std::string& text, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON: ", e.what()));
  }
  if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  LlamaShape s;
  absl::StatusOr<std::string> model_type = StringKey(root, "model_type", path, "llama");
  if (!model_type.ok()) return model_type.status();
  const std::string& type = *model_type;
  if (type != "llama" && type != "mistral" && type != "qwen2" && type != "mixtral") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": model_type: '", type, "' is not of the Llama family (llama, mistral, qwen2, mixtral)"));
  }
  auto read = [&](const std::string& key, std::optional<int64_t> fallback, int64_t* out) -> absl::Status {
    absl::StatusOr<int64_t> value = IntKey(root, key, path, fallback);
    if (!value.ok()) return value.status();
    *out = *value;
    return absl::OkStatus();
  };
  for (auto [key, out] : {std::pair{"hidden_size", &s.hidden}, std::pair{"intermediate_size", &s.intermediate},
                          std::pair{"num_hidden_layers", &s.layers}, std::pair{"num_attention_heads", &s.heads},
                          std::pair{"vocab_size", &s.vocab}}) {
    if (absl::Status st = read(key, std::nullopt, out); !st.ok()) return st;
  }
  for (auto [key, value] : {std::pair{"num_attention_heads", s.heads}, std::pair{"num_hidden_layers", s.layers},
                            std::pair{"hidden_size", s.hidden}}) {
    if (value == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " is 0"));
  }
  if (absl::Status st = read("num_key_value_heads", s.heads, &s.kv_heads); !st.ok()) return st;
  if (absl::Status st = read("head_dim", s.hidden / s.heads, &s.head_dim); !st.ok()) return st;
  if (absl::Status st = read("max_position_embeddings", 2048, &s.max_position_embeddings); !st.ok()) return st;
  if (type == "mixtral") {
    if (absl::Status st = read("num_local_experts", 8, &s.experts); !st.ok()) return st;
  }
  for (auto [key, out] : {std::pair{"tie_word_embeddings", &s.tied}, std::pair{"attention_bias", &s.attention_bias},
                          std::pair{"mlp_bias", &s.mlp_bias}}) {
    absl::StatusOr<bool> value = BoolKey(root, key, path);
    if (!value.ok()) return value.status();
    *out = *value;
  }
  s.qkv_bias = type == "qwen2";
  return s;
}

absl::StatusOr<ModelSize> ModelSizeOf(const JobConfig& job) {
  ModelSize size;
  const ModelConfig& m = job.model;
  if (m.type == "llama") {
    if (m.from.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(job.path, ": model.from: a llama model is sized by its "
                                                     "Hugging Face folder's config.json"));
    }
    const std::string path = m.from + "/config.json";
    absl::StatusOr<std::string> text = ReadText(path);
    if (!text.ok()) return text.status();
    absl::StatusOr<LlamaShape> shape = ParseLlamaShape(*text, path);
    if (!shape.ok()) return shape.status();
    const int64_t base = LlamaParameters(*shape);
    size.trainable = base;
    if (job.lora.r > 0) {
      absl::StatusOr<int64_t> adapters = LlamaLoraParameters(*shape, job.lora);
      if (!adapters.ok()) return absl::InvalidArgumentError(absl::StrCat(job.path, ": ", adapters.status().message()));
      size.trainable = *adapters;
      size.frozen = base;
    }
    const int64_t mlp = shape->hidden * shape->intermediate + (shape->mlp_bias ? shape->intermediate : 0);
    size.largest_layer = std::max(shape->vocab * shape->hidden, mlp);
    size.block = (base - shape->vocab * shape->hidden * (shape->tied ? 1 : 2) - shape->hidden) / shape->layers;
    size.layers = shape->layers;
    size.hidden = shape->hidden;
    size.heads = shape->heads;
    size.vocab = shape->vocab;
    size.sequence_length = m.sequence_length > 0 ? m.sequence_length : shape->max_position_embeddings;
    size.description = absl::StrCat("llama (", m.from, "): ", shape->layers, " layers, hidden ", shape->hidden,
                                    ", ", shape->heads, " heads (", shape->kv_heads, " key/value), intermediate ",
                                    shape->intermediate, shape->experts > 0 ? absl::StrCat(", ", shape->experts, " experts") : "",
                                    ", vocabulary ", shape->vocab, job.lora.r > 0 ? absl::StrCat(", LoRA r=", job.lora.r) : "");
    return size;
  }
  if (m.type != "gpt") {
    return absl::InvalidArgumentError(absl::StrCat(job.path, ": model.type: '", m.type, "' (gpt or llama)"));
  }
  if (m.moe.num_experts > 0) {
    return absl::UnimplementedError(
        absl::StrCat(job.path, ": model.moe: the estimate does not size mixture-of-experts GPT models yet"));
  }
  int64_t vocab = m.vocab_size;
  if (vocab == 0) vocab = PreparedVocabulary(job.data.prepared);
  if (vocab == 0) {
    if (job.data.tokenizer == "byte") {
      vocab = kByteVocabulary;
    } else if (job.data.tokenizer == "sentencepiece") {
      vocab = job.data.tokenizer_vocab_size > 0 ? job.data.tokenizer_vocab_size : kDefaultSentencepieceVocabulary;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          job.path, ": model.vocab_size is 0 (the dataset's at run time): give it for the estimate"));
    }
  }
  const int64_t tp = std::max<int64_t>(1, job.ds.tensor_parallel.tp_size);
  vocab = RoundUp(vocab, tp * std::max<int64_t>(1, m.make_vocab_size_divisible_by));
  GptShape shape{m.layers, m.width, vocab, m.sequence_length};
  size.trainable = GptParameters(shape);
  const int64_t d = m.width;
  size.largest_layer = std::max(vocab * d, 4 * d * d + 4 * d);
  size.block = 12 * d * d + 13 * d;
  size.layers = m.layers;
  size.hidden = m.width;
  size.heads = m.heads;
  size.vocab = vocab;
  size.sequence_length = m.sequence_length;
  size.description = absl::StrCat("gpt: ", m.layers, " layers, width ", m.width, ", ", m.heads, " heads, vocabulary ",
                                  vocab, ", sequence ", m.sequence_length);
  return size;
}

namespace {

// What a projection of `in` x `out` holds on tensor-parallel rank 0 of `tp`
// with its bias and a LoRA adapter of rank `r` (Note [LoRA under tensor
// parallelism]): split by output (column), by input (row) or whole.
enum class Split { kColumn, kRow, kWhole };
// `adapters`, when given, also receives the adapter's elements.
int64_t ProjectionElements(int64_t in, int64_t out, Split split, int64_t tp, bool bias, int64_t r,
                           int64_t* adapters = nullptr) {
  const int64_t local_in = split == Split::kRow ? in / tp : in;
  const int64_t local_out = split == Split::kColumn ? out / tp : out;
  int64_t elements = local_in * local_out;
  if (bias) elements += split == Split::kColumn ? local_out : out;  // a row split's bias is added whole
  if (r > 0) {
    elements += r * local_in + local_out * r;
    if (adapters != nullptr) *adapters += r * local_in + local_out * r;
  }
  return elements;
}

// Whether LoRA adapts the projection of full module name `name`
// ("model.layers.3.self_attn.q_proj", "lm_head"): PEFT's matching, as
// ApplyLora does it (runtime/model/lora.cc): the name, or a suffix after a
// dot; all-linear takes every projection but the head.
bool Targets(const LoraConfig& lora, const std::string& name) {
  if (lora.r <= 0) return false;
  for (const std::string& target : lora.target_modules) {
    if (target == "all-linear" ? name != "lm_head" : name == target || absl::EndsWith(name, "." + target)) {
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<LayerSize>> LayerSizesOf(const JobConfig& job) {
  const ModelConfig& m = job.model;
  const int64_t tp = std::max<int64_t>(1, job.ds.tensor_parallel.tp_size);
  const int64_t divisor = std::max<int64_t>(1, m.make_vocab_size_divisible_by);
  std::vector<LayerSize> layers;
  if (m.type == "gpt") {
    if (m.moe.num_experts > 0) {
      return absl::UnimplementedError(absl::StrCat(job.path, ": model.moe: mixture-of-experts GPT layers are not sized "
                                                   "without building the model yet"));
    }
    absl::StatusOr<ModelSize> size = ModelSizeOf(job);  // the padded vocabulary
    if (!size.ok()) return size.status();
    const int64_t d = m.width;
    const int64_t embedding = size->vocab / tp * d + m.sequence_length * d;
    layers.push_back({"embedding", "Embedding", embedding, embedding});
    // Two LayerNorms, qkv (3 fused parts), the output projection, the 4x MLP.
    const int64_t block = 4 * d + ProjectionElements(d, 3 * d, Split::kColumn, tp, true, 0) +
                          ProjectionElements(d, d, Split::kRow, tp, true, 0) +
                          ProjectionElements(d, 4 * d, Split::kColumn, tp, true, 0) +
                          ProjectionElements(4 * d, d, Split::kRow, tp, true, 0);
    for (int64_t i = 0; i < m.layers; ++i) layers.push_back({absl::StrCat("blocks.", i), "GptBlock", block, block});
    layers.push_back({"head", "Head", 2 * d, 2 * d});  // the final LayerNorm; the head is the tied embedding
    return layers;
  }
  if (m.type != "llama") {
    return absl::InvalidArgumentError(absl::StrCat(job.path, ": model.type: '", m.type, "' (gpt or llama)"));
  }
  if (m.from.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(job.path, ": model.from: a llama model is sized by its Hugging Face folder's config.json"));
  }
  const std::string path = m.from + "/config.json";
  absl::StatusOr<std::string> text = ReadText(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<LlamaShape> parsed = ParseLlamaShape(*text, path);
  if (!parsed.ok()) return parsed.status();
  const LlamaShape& s = *parsed;
  if (s.experts > 0 && tp > 1) {
    return absl::UnimplementedError("model.moe with tensor parallelism is not yet supported");
  }
  const int64_t h = s.hidden, q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  const int64_t local_vocab = RoundUp(s.vocab, tp * divisor) / tp;
  const int64_t r = job.lora.r;
  // With LoRA only the adapters train.
  const bool lora = r > 0;
  layers.push_back({"embedding", "Embedding", local_vocab * h, lora ? 0 : local_vocab * h});
  const bool q_bias = s.attention_bias || s.qkv_bias;
  const Split kv_split = s.kv_heads < tp ? Split::kWhole : Split::kColumn;
  for (int64_t i = 0; i < s.layers; ++i) {
    // Each layer apart: a LoRA target may name one layer's projection.
    const std::string attention = absl::StrCat("model.layers.", i, ".self_attn."), mlp = absl::StrCat("model.layers.", i, ".mlp.");
    auto adapter = [&](const std::string& name) { return Targets(job.lora, name) ? r : 0; };
    int64_t layer = 2 * h;  // the two RMSNorms
    int64_t adapters = 0;
    layer += ProjectionElements(h, q, Split::kColumn, tp, q_bias, adapter(attention + "q_proj"), &adapters);
    layer += ProjectionElements(h, kv, kv_split, tp, q_bias, adapter(attention + "k_proj"), &adapters);
    layer += ProjectionElements(h, kv, kv_split, tp, q_bias, adapter(attention + "v_proj"), &adapters);
    layer += ProjectionElements(q, h, Split::kRow, tp, s.attention_bias, adapter(attention + "o_proj"), &adapters);
    if (s.experts > 0) {
      // Mixtral: a router and the experts' w1, w2, w3, each expert's adapted
      // apart (a target may name one expert's projection).
      layer += ProjectionElements(h, s.experts, Split::kWhole, tp, false,
                                  adapter(absl::StrCat("model.layers.", i, ".block_sparse_moe.gate")), &adapters);
      for (int64_t e = 0; e < s.experts; ++e) {
        const std::string expert = absl::StrCat("model.layers.", i, ".block_sparse_moe.experts.", e, ".");
        layer += ProjectionElements(h, s.intermediate, Split::kWhole, tp, false, adapter(expert + "w1"), &adapters);
        layer += ProjectionElements(s.intermediate, h, Split::kWhole, tp, false, adapter(expert + "w2"), &adapters);
        layer += ProjectionElements(h, s.intermediate, Split::kWhole, tp, false, adapter(expert + "w3"), &adapters);
      }
    } else {
      layer += ProjectionElements(h, s.intermediate, Split::kColumn, tp, s.mlp_bias, adapter(mlp + "gate_proj"), &adapters);
      layer += ProjectionElements(h, s.intermediate, Split::kColumn, tp, s.mlp_bias, adapter(mlp + "up_proj"), &adapters);
      layer += ProjectionElements(s.intermediate, h, Split::kRow, tp, s.mlp_bias, adapter(mlp + "down_proj"), &adapters);
    }
    layers.push_back({absl::StrCat("layers.", i), "LlamaDecoderLayer", layer, lora ? adapters : layer});
  }
  int64_t head = h;  // the final RMSNorm
  const int64_t head_adapter = !s.tied && Targets(job.lora, "lm_head") ? r * h + local_vocab * r : 0;
  if (!s.tied) head += local_vocab * h + head_adapter;
  layers.push_back({"head", "Head", head, lora ? head_adapter : head});
  return layers;
}

}  // namespace dslaunch::runtime

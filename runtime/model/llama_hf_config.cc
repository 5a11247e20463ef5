#include "runtime/model/llama_hf_config.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_quote.h"

namespace dslaunch::runtime {
namespace {



// A parsed JSON value as JSON text again. yaml-cpp tags quoted scalars "!":
// those are strings; plain ones are null, booleans or numbers.
std::string NodeToJson(const YAML::Node& node) {
  if (node.IsMap()) {
    std::vector<std::string> fields;
    for (const auto& item : node) {
      fields.push_back(absl::StrCat(JsonQuote(item.first.Scalar()), ": ", NodeToJson(item.second)));
    }
    return absl::StrCat("{", absl::StrJoin(fields, ", "), "}");
  }
  if (node.IsSequence()) {
    std::vector<std::string> items;
    for (const auto& item : node) items.push_back(NodeToJson(item));
    return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
  }
  if (node.IsNull() || !node.IsDefined()) return "null";
  if (node.Tag() == "!") return JsonQuote(node.Scalar());
  return node.Scalar();
}

bool IsQuoted(const YAML::Node& node) { return node.IsScalar() && node.Tag() == "!"; }

// Reads one config.json; every problem is collected and reported at once.
class ConfigReader {
 public:
  ConfigReader(const YAML::Node& root, std::string path) : root_(root), path_(std::move(path)) {}

  void Problem(const std::string& key, const std::string& what) {
    problems_.push_back(absl::StrCat(key, ": ", what));
  }

  bool Has(const std::string& key) const { return root_[key] && !root_[key].IsNull(); }

  template <typename T>
  std::optional<T> Get(const YAML::Node& node, const std::string& key) {
    if (!node || node.IsNull()) return std::nullopt;
    if (!node.IsScalar() || IsQuoted(node)) {
      Problem(key, absl::StrCat("expected ", Expected<T>(), ", got ", NodeToJson(node)));
      return std::nullopt;
    }
    try {
      return node.as<T>();
    } catch (const YAML::Exception&) {
      Problem(key, absl::StrCat("expected ", Expected<T>(), ", got ", NodeToJson(node)));
      return std::nullopt;
    }
  }

  template <typename T>
  std::optional<T> Get(const std::string& key) { return Get<T>(root_[key], key); }

  std::optional<std::string> GetString(const YAML::Node& node, const std::string& key) {
    if (!node || node.IsNull()) return std::nullopt;
    if (!IsQuoted(node)) {
      Problem(key, absl::StrCat("expected a string, got ", NodeToJson(node)));
      return std::nullopt;
    }
    return node.Scalar();
  }

  int64_t Required(const std::string& key, int64_t min) {
    std::optional<int64_t> value = Get<int64_t>(key);
    if (!value && !root_[key]) Problem(key, "missing (a Llama-family config.json has it)");
    if (value && *value < min) Problem(key, absl::StrCat(*value, " is below ", min));
    return value.value_or(min);
  }

  const std::vector<std::string>& problems() const { return problems_; }
  const std::string& path() const { return path_; }

 private:
  template <typename T>
  static const char* Expected() {
    if constexpr (std::is_same_v<T, bool>) return "a boolean";
    if constexpr (std::is_integral_v<T>) return "an integer";
    return "a number";
  }

  const YAML::Node& root_;
  std::string path_;
  std::vector<std::string> problems_;
};

// Keys that describe the file, the tokenizer or the Python object, not the
// arithmetic: kept and written back.
const std::set<std::string>& DescriptiveKeys() {
  static const auto* const keys = new std::set<std::string>{
      "architectures", "transformers_version", "_name_or_path", "bos_token_id", "eos_token_id", "pad_token_id",
      "use_cache", "initializer_range", "pretraining_tp", "max_window_layers", "output_attentions",
      "output_hidden_states", "return_dict", "torchscript", "use_bfloat16", "is_decoder", "is_encoder_decoder",
      "tie_encoder_decoder", "id2label", "label2id", "problem_type", "tokenizer_class", "prefix", "task_specific_params",
      "chunk_size_feed_forward", "auto_map", "model_name", "name_or_path"};
  return *keys;
}

// The keys ParseLlamaHfConfig reads for the math (and torch_dtype/dtype).
const std::set<std::string>& MathKeys() {
  static const auto* const keys = new std::set<std::string>{
      "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
      "max_position_embeddings", "tie_word_embeddings", "attention_bias", "mlp_bias", "hidden_act", "attention_dropout",
      "sliding_window", "use_sliding_window", "torch_dtype", "dtype",
      // Mixtral.
      "num_local_experts", "num_experts_per_tok", "router_aux_loss_coef", "router_jitter_noise",
      "output_router_logits"};
  return *keys;
}

void ReadRope(ConfigReader& reader, const YAML::Node& root, LlamaHfConfig& config) {
  RopeOptions& rope = config.options.rope;
  if (auto theta = reader.Get<double>("rope_theta")) rope.theta = *theta;
  // Newer transformers write rope_parameters {rope_type, rope_theta, ...};
  // older ones rope_scaling {type | rope_type, factor, ...}. Both are read;
  // rope_parameters wins when both are given.
  // (A yaml-cpp Node cannot be re-pointed: assigning to one copies into it.)
  const bool parameters_form = root["rope_parameters"] && !root["rope_parameters"].IsNull();
  const std::string key = parameters_form ? "rope_parameters" : "rope_scaling";
  const YAML::Node scaling = root[key];
  if (!scaling || scaling.IsNull()) return;
  if (!scaling.IsMap()) {
    reader.Problem(key, absl::StrCat("expected an object or null, got ", NodeToJson(scaling)));
    return;
  }
  std::string type_key = key + ".rope_type";
  std::optional<std::string> type = reader.GetString(scaling["rope_type"], type_key);
  if (!type && scaling["type"]) {
    type_key = key + ".type";
    type = reader.GetString(scaling["type"], type_key);
  }
  std::set<std::string> allowed = {"rope_type", "type"};
  if (key == "rope_parameters") {
    allowed.insert("rope_theta");
    if (auto theta = reader.Get<double>(scaling["rope_theta"], key + ".rope_theta")) rope.theta = *theta;
  }
  const std::string name = type.value_or("default");
  RopeScaling& s = rope.scaling;
  if (name == "default") {
    s.type = RopeScaling::Type::kNone;
  } else if (name == "linear" || name == "dynamic") {
    s.type = name == "linear" ? RopeScaling::Type::kLinear : RopeScaling::Type::kDynamic;
    allowed.insert({"factor", "original_max_position_embeddings"});
  } else if (name == "llama3") {
    s.type = RopeScaling::Type::kLlama3;
    allowed.insert({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  } else {
    reader.Problem(type_key, absl::StrCat("'", name,
                                          "' is not a rope type this runtime computes (default, linear, dynamic, "
                                          "llama3)"));
    return;
  }
  for (const auto& item : scaling) {
    const std::string field = item.first.Scalar();
    if (!allowed.count(field)) {
      reader.Problem(absl::StrCat(key, ".", field),
                     absl::StrCat("not a key of rope type '", name, "' (", absl::StrJoin(allowed, ", "), ")"));
    }
  }
  if (s.type == RopeScaling::Type::kNone) return;
  std::optional<double> factor = reader.Get<double>(scaling["factor"], key + ".factor");
  if (!factor) {
    if (!scaling["factor"]) reader.Problem(key + ".factor", absl::StrCat("missing (rope type '", name, "' needs it)"));
  } else if (*factor < 1.0) {
    reader.Problem(key + ".factor", absl::StrCat(*factor, " is below 1"));
  } else {
    s.factor = *factor;
  }
  if (s.type == RopeScaling::Type::kLlama3) {
    auto low = reader.Get<double>(scaling["low_freq_factor"], key + ".low_freq_factor");
    auto high = reader.Get<double>(scaling["high_freq_factor"], key + ".high_freq_factor");
    auto original = reader.Get<int64_t>(scaling["original_max_position_embeddings"],
                                        key + ".original_max_position_embeddings");
    for (const char* needed : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      if (!scaling[needed]) reader.Problem(absl::StrCat(key, ".", needed), "missing (rope type 'llama3' needs it)");
    }
    if (low) s.low_freq_factor = *low;
    if (high) s.high_freq_factor = *high;
    if (original) s.original_max_position_embeddings = *original;
    if (low && high && *high <= *low) {
      reader.Problem(key + ".high_freq_factor",
                     absl::StrCat(*high, " must be above low_freq_factor (", *low, ")"));
    }
  }
}

}  // namespace

absl::StatusOr<LlamaHfConfig> ParseLlamaHfConfig(const std::string& text, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON (line ", e.mark.line + 1, ", column ",
                                                   e.mark.column + 1, "): ", e.msg));
  }
  if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(path, ": expected a JSON object"));
  LlamaHfConfig config;
  ConfigReader reader(root, path);
  LlamaOptions& o = config.options;

  std::optional<std::string> model_type = reader.GetString(root["model_type"], "model_type");
  if (!root["model_type"]) {
    reader.Problem("model_type", "missing (expected \"llama\", \"mistral\", \"qwen2\" or \"mixtral\")");
  }
  if (model_type) {
    config.model_type = *model_type;
    if (*model_type != "llama" && *model_type != "mistral" && *model_type != "qwen2" && *model_type != "mixtral") {
      reader.Problem("model_type", absl::StrCat("'", *model_type,
                                                "' is not a Llama-family architecture this runtime has (llama, "
                                                "mistral, qwen2, mixtral)"));
    }
  }
  for (const auto& item : root) {
    const std::string key = item.first.Scalar();
    if (MathKeys().count(key)) continue;
    if (DescriptiveKeys().count(key)) {
      config.descriptive[key] = NodeToJson(item.second);
      continue;
    }
    reader.Problem(key, key == "quantization_config"
                            ? "quantized checkpoints are not supported (the weights must be F32, F16 or BF16)"
                            : "not a key of the Llama family this runtime understands: it may change the model, "
                              "so it is refused rather than ignored");
  }

  o.hidden = reader.Required("hidden_size", 1);
  o.intermediate = reader.Required("intermediate_size", 1);
  o.layers = reader.Required("num_hidden_layers", 1);
  o.heads = reader.Required("num_attention_heads", 1);
  o.vocab_size = reader.Required("vocab_size", 1);
  o.kv_heads = reader.Get<int64_t>("num_key_value_heads").value_or(o.heads);
  if (o.kv_heads < 1 || o.heads % o.kv_heads != 0) {
    reader.Problem("num_key_value_heads",
                   absl::StrCat(o.kv_heads, " does not divide num_attention_heads (", o.heads, ")"));
  }
  if (reader.Has("head_dim")) {
    o.head_dim = reader.Get<int64_t>("head_dim").value_or(0);
  } else {
    if (o.heads > 0 && o.hidden % o.heads != 0) {
      reader.Problem("hidden_size", absl::StrCat(o.hidden, " is not divisible by num_attention_heads (", o.heads,
                                                 ") and there is no head_dim"));
    }
    o.head_dim = o.heads > 0 ? o.hidden / o.heads : 0;
  }
  if (o.head_dim < 2 || o.head_dim % 2 != 0) {
    reader.Problem("head_dim", absl::StrCat(o.head_dim, " must be even (rotary embeddings turn pairs)"));
  }
  o.rms_norm_eps = reader.Get<double>("rms_norm_eps").value_or(1e-6);
  if (!(o.rms_norm_eps > 0)) reader.Problem("rms_norm_eps", "must be above 0");
  config.max_position_embeddings = reader.Get<int64_t>("max_position_embeddings").value_or(2048);
  o.rope.max_position_embeddings = config.max_position_embeddings;
  o.rope.head_dim = o.head_dim;
  ReadRope(reader, root, config);
  o.tie_word_embeddings = reader.Get<bool>("tie_word_embeddings").value_or(false);
  const bool attention_bias = reader.Get<bool>("attention_bias").value_or(false);
  o.qkv_bias = attention_bias || config.model_type == "qwen2";
  o.output_bias = attention_bias;
  o.mlp_bias = reader.Get<bool>("mlp_bias").value_or(false);
  if (auto range = reader.Get<double>(root["initializer_range"], "initializer_range")) o.initializer_range = *range;
  if (auto act = reader.GetString(root["hidden_act"], "hidden_act"); act && *act != "silu") {
    reader.Problem("hidden_act", absl::StrCat("'", *act, "': only \"silu\" (SwiGLU) is built"));
  }
  if (auto dropout = reader.Get<double>("attention_dropout"); dropout && *dropout != 0.0) {
    reader.Problem("attention_dropout", absl::StrCat(*dropout, ": only 0 is supported"));
  }
  if (reader.Has("sliding_window")) {
    if (auto window = reader.Get<int64_t>("sliding_window")) {
      config.sliding_window = *window;
      if (*window < 1) reader.Problem("sliding_window", absl::StrCat(*window, " is below 1"));
      o.sliding_window = std::max<int64_t>(*window, 0);
    }
  }
  // Mixtral (Note [Mixture of experts]): every layer's MLP a router over
  // num_local_experts SwiGLU experts, the top num_experts_per_tok of each
  // token's softmax renormalised, no capacity (dropless), no sampling.
  if (config.model_type == "mixtral") {
    GatingOptions& g = o.moe.gating;
    g.num_experts = reader.Required("num_local_experts", 1);
    g.top_k = reader.Get<int64_t>("num_experts_per_tok").value_or(2);
    if (g.top_k < 1 || g.top_k > g.num_experts) {
      reader.Problem("num_experts_per_tok",
                     absl::StrCat(g.top_k, " is not between 1 and num_local_experts (", g.num_experts, ")"));
    }
    g.drop_tokens = false;
    g.second_expert_sampling = false;
    g.use_rts = false;
    o.moe.every = 1;
    config.router_aux_loss_coef = reader.Get<double>("router_aux_loss_coef").value_or(0.001);
    config.output_router_logits = reader.Get<bool>("output_router_logits").value_or(false);
    // As transformers: the load-balancing loss joins the training loss only
    // with output_router_logits.
    o.moe.aux_loss_coef = config.output_router_logits ? config.router_aux_loss_coef : 0.0;
    if (auto jitter = reader.Get<double>("router_jitter_noise"); jitter && *jitter != 0.0) {
      reader.Problem("router_jitter_noise", absl::StrCat(*jitter, ": only 0 is supported"));
    }
  } else {
    for (const char* key : {"num_local_experts", "num_experts_per_tok", "router_aux_loss_coef", "router_jitter_noise",
                            "output_router_logits"}) {
      if (reader.Has(key)) reader.Problem(key, absl::StrCat("a Mixtral key in a ", config.model_type, " config"));
    }
  }
  if (reader.Get<bool>("use_sliding_window").value_or(false)) {
    reader.Problem("use_sliding_window", "true: sliding-window attention is not built");
  }
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (auto dtype = reader.GetString(root[key], key)) {
      config.torch_dtype = *dtype;
      if (*dtype != "float32" && *dtype != "float16" && *dtype != "bfloat16") {
        reader.Problem(key, absl::StrCat("'", *dtype, "': expected float32, float16 or bfloat16"));
      }
    }
  }
  if (!reader.problems().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", absl::StrJoin(reader.problems(), "; ")));
  }
  return config;
}

std::string LlamaHfConfigJson(const LlamaHfConfig& config, const std::string& torch_dtype) {
  const LlamaOptions& o = config.options;
  std::vector<std::pair<std::string, std::string>> fields;
  auto add = [&](const std::string& key, const std::string& json) { fields.emplace_back(key, json); };
  auto number = [](double value) {
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "%.17g", value);
    std::string text = buffer;
    // JSON readers take 1e-05 as a float; keep integral doubles floats too.
    if (text.find_first_of(".eE") == std::string::npos) text += ".0";
    return text;
  };
  std::string architecture = config.model_type == "mistral"   ? "MistralForCausalLM"
                             : config.model_type == "qwen2"   ? "Qwen2ForCausalLM"
                             : config.model_type == "mixtral" ? "MixtralForCausalLM"
                                                              : "LlamaForCausalLM";
  std::map<std::string, std::string> descriptive = config.descriptive;
  if (!descriptive.count("architectures")) descriptive["architectures"] = absl::StrCat("[\"", architecture, "\"]");
  add("model_type", JsonQuote(config.model_type));
  add("hidden_size", absl::StrCat(o.hidden));
  add("intermediate_size", absl::StrCat(o.intermediate));
  add("num_hidden_layers", absl::StrCat(o.layers));
  add("num_attention_heads", absl::StrCat(o.heads));
  add("num_key_value_heads", absl::StrCat(o.kv_heads));
  add("head_dim", absl::StrCat(o.head_dim));
  add("vocab_size", absl::StrCat(o.vocab_size));
  add("rms_norm_eps", number(o.rms_norm_eps));
  add("rope_theta", number(o.rope.theta));
  const RopeScaling& s = o.rope.scaling;
  switch (s.type) {
    case RopeScaling::Type::kNone:
      add("rope_scaling", "null");
      break;
    case RopeScaling::Type::kLinear:
    case RopeScaling::Type::kDynamic:
      add("rope_scaling", absl::StrCat("{\"rope_type\": ", JsonQuote(RopeScalingName(s.type)),
                                       ", \"factor\": ", number(s.factor), "}"));
      break;
    case RopeScaling::Type::kLlama3:
      add("rope_scaling",
          absl::StrCat("{\"rope_type\": \"llama3\", \"factor\": ", number(s.factor), ", \"low_freq_factor\": ",
                       number(s.low_freq_factor), ", \"high_freq_factor\": ", number(s.high_freq_factor),
                       ", \"original_max_position_embeddings\": ", s.original_max_position_embeddings, "}"));
      break;
  }
  add("max_position_embeddings", absl::StrCat(config.max_position_embeddings));
  add("tie_word_embeddings", o.tie_word_embeddings ? "true" : "false");
  if (config.model_type != "qwen2") add("attention_bias", o.output_bias ? "true" : "false");
  add("mlp_bias", o.mlp_bias ? "true" : "false");
  add("hidden_act", "\"silu\"");
  add("attention_dropout", "0.0");
  if (config.model_type == "mistral" || config.model_type == "mixtral") {
    add("sliding_window", config.sliding_window ? absl::StrCat(*config.sliding_window) : "null");
  }
  if (config.model_type == "mixtral") {
    add("num_local_experts", absl::StrCat(o.moe.gating.num_experts));
    add("num_experts_per_tok", absl::StrCat(o.moe.gating.top_k));
    add("router_aux_loss_coef", number(config.router_aux_loss_coef));
    add("router_jitter_noise", "0.0");
    add("output_router_logits", config.output_router_logits ? "true" : "false");
  }
  if (config.model_type == "qwen2") add("use_sliding_window", "false");
  add("torch_dtype", JsonQuote(torch_dtype));
  for (const auto& [key, json] : descriptive) add(key, json);
  std::vector<std::string> lines;
  for (const auto& [key, json] : fields) lines.push_back(absl::StrCat("  ", JsonQuote(key), ": ", json));
  return absl::StrCat("{\n", absl::StrJoin(lines, ",\n"), "\n}\n");
}

}  // namespace dslaunch::runtime

#include "runtime/config/auto_resolution.h"

#include <functional>

#include "absl/strings/str_cat.h"
#include "runtime/config/config_limits.h"

namespace dslaunch::runtime::config_internal {
namespace {

// One "auto" and what fills it (Note ["auto"]; the Hugging Face Trainer's
// choices, bucket sizes from the model width h as in its ZeRO-3 integration).
struct AutoRule {
  const char* path;
  const char* source;  // named in messages
  bool needs_width;
  std::function<void(const TrainConfig& train, int64_t width, DsConfig* config)> fill;
};

const std::vector<AutoRule>& AutoRules() {
  static const auto* rules = new std::vector<AutoRule>{
      {"gradient_clipping", "train.grad_clip", false,
       [](const TrainConfig& t, int64_t, DsConfig* c) { c->gradient_clipping = t.grad_clip; }},
      {"optimizer.params.lr", "train.lr", false,
       [](const TrainConfig& t, int64_t, DsConfig* c) { c->optimizer.lr = t.lr; }},
      {"optimizer.params.betas", "train.betas", false,
       [](const TrainConfig& t, int64_t, DsConfig* c) { c->optimizer.betas = t.betas; }},
      {"optimizer.params.eps", "train.eps", false,
       [](const TrainConfig& t, int64_t, DsConfig* c) { c->optimizer.eps = t.eps; }},
      {"optimizer.params.weight_decay", "train.weight_decay", false,
       [](const TrainConfig& t, int64_t, DsConfig* c) {
         c->optimizer.weight_decay = t.weight_decay;
       }},
      {"scheduler.params.warmup_min_lr", "train.min_lr", false,
       [](const TrainConfig& t, int64_t, DsConfig* c) { c->scheduler.warmup_min_lr = t.min_lr; }},
      {"scheduler.params.warmup_max_lr", "train.lr", false,
       [](const TrainConfig& t, int64_t, DsConfig* c) { c->scheduler.warmup_max_lr = t.lr; }},
      {"scheduler.params.warmup_num_steps", "train.warmup_steps", false,
       [](const TrainConfig& t, int64_t, DsConfig* c) {
         c->scheduler.warmup_num_steps = t.warmup_steps;
       }},
      {"scheduler.params.total_num_steps", "train.steps", false,
       [](const TrainConfig& t, int64_t, DsConfig* c) { c->scheduler.total_num_steps = t.steps; }},
      {"fp16.enabled", "train.precision", false,
       [](const TrainConfig& t, int64_t, DsConfig* c) { c->fp16.enabled = t.precision == "fp16"; }},
      {"bf16.enabled", "train.precision", false,
       [](const TrainConfig& t, int64_t, DsConfig* c) { c->bf16.enabled = t.precision == "bf16"; }},
      {"zero_optimization.reduce_bucket_size", "model.width^2", true,
       [](const TrainConfig&, int64_t h, DsConfig* c) {
         c->zero_optimization.reduce_bucket_size = h * h;
       }},
      {"zero_optimization.stage3_prefetch_bucket_size", "0.9 * model.width^2", true,
       [](const TrainConfig&, int64_t h, DsConfig* c) {
         c->zero_optimization.stage3_prefetch_bucket_size = static_cast<int64_t>(0.9 * h * h);
       }},
      {"zero_optimization.stage3_param_persistence_threshold", "10 * model.width", true,
       [](const TrainConfig&, int64_t h, DsConfig* c) {
         c->zero_optimization.stage3_param_persistence_threshold = 10 * h;
       }},
  };
  return *rules;
}

bool IsBatchKey(const std::string& path) {
  return path == "train_batch_size" || path == "train_micro_batch_size_per_gpu" ||
         path == "gradient_accumulation_steps";
}

}  // namespace

void ResolveAuto(const WalkResult& walk, const TreeSource& source, const JobAutoSources* job,
                 DsConfig* config, Problems* problems) {
  for (const std::string& path : walk.autos) {
    if (IsBatchKey(path)) continue;  // ResolveBatchSizes
    if (path == "pipeline.stages") {
      config->pipeline.stages = 1;  // the stage count of a model built without pipeline stages
      continue;
    }
    const AutoRule* rule = nullptr;
    for (const AutoRule& candidate : AutoRules()) {
      if (path == candidate.path) rule = &candidate;
    }
    auto problem = [&](absl::string_view what) {
      problems->AtKey(source, walk.WrittenPath(path), walk.MarkOf(path), what);
    };
    if (rule == nullptr) {
      problem(
          "\"auto\" has nothing to resolve from here");  // a table key marked Auto() without a rule
      continue;
    }
    if (job == nullptr) {
      if (path == "scheduler.params.warmup_min_lr") {
        config->scheduler.warmup_min_lr = 0;  // the Hugging Face Trainer's choice
        continue;
      }
      problem(absl::StrCat("\"auto\" needs a job file (it takes ", rule->source, ")"));
      continue;
    }
    // Without a usable width the model's own problem is already reported.
    if (rule->needs_width && job->model_width <= 0) continue;
    rule->fill(*job->train, job->model_width, config);
  }
}

void CheckAgreesWithJob(const WalkResult& walk, const TreeSource& source, const JobAutoSources& job,
                        const DsConfig& config, Problems* problems) {
  const TrainConfig& train = *job.train;
  const WalkResult& train_walk = *job.train_walk;
  auto check = [&](const std::string& ds_path, const std::string& train_path, bool agree,
                   const std::string& ds_value, const std::string& train_value) {
    if (agree || !walk.HasValue(ds_path) || !train_walk.HasValue(train_path)) return;
    problems->AtKey(
        source, walk.WrittenPath(ds_path), walk.MarkOf(ds_path),
        absl::StrCat(ds_value, " disagrees with ", train_path, " (", train_value,
                     ") in the job file; write \"auto\" to take it, or make them equal"));
  };
  auto pair_text = [](const std::array<double, 2>& pair) {
    return absl::StrCat("[", FormatNumber(pair[0]), ", ", FormatNumber(pair[1]), "]");
  };
  const OptimizerConfig& o = config.optimizer;
  check("optimizer.params.lr", "train.lr", o.lr == train.lr, FormatNumber(o.lr),
        FormatNumber(train.lr));
  check("optimizer.params.betas", "train.betas", o.betas == train.betas, pair_text(o.betas),
        pair_text(train.betas));
  check("optimizer.params.eps", "train.eps", o.eps == train.eps, FormatNumber(o.eps),
        FormatNumber(train.eps));
  check("optimizer.params.weight_decay", "train.weight_decay", o.weight_decay == train.weight_decay,
        FormatNumber(o.weight_decay), FormatNumber(train.weight_decay));
  check("gradient_clipping", "train.grad_clip", config.gradient_clipping == train.grad_clip,
        FormatNumber(config.gradient_clipping), FormatNumber(train.grad_clip));
  check("scheduler.params.warmup_max_lr", "train.lr", config.scheduler.warmup_max_lr == train.lr,
        FormatNumber(config.scheduler.warmup_max_lr), FormatNumber(train.lr));
  check("scheduler.params.warmup_num_steps", "train.warmup_steps",
        config.scheduler.warmup_num_steps == train.warmup_steps,
        absl::StrCat(config.scheduler.warmup_num_steps), absl::StrCat(train.warmup_steps));
  check("train_micro_batch_size_per_gpu", "train.micro_batch_size",
        config.train_micro_batch_size_per_gpu == train.micro_batch_size,
        absl::StrCat(config.train_micro_batch_size_per_gpu), absl::StrCat(train.micro_batch_size));
  check("train_batch_size", "train.global_batch_size",
        config.train_batch_size == train.global_batch_size, absl::StrCat(config.train_batch_size),
        absl::StrCat(train.global_batch_size));

  if (!train_walk.HasValue("train.precision")) return;
  for (const std::string half : {"fp16", "bf16"}) {
    const bool enabled = half == "fp16" ? config.fp16.enabled : config.bf16.enabled;
    const bool wanted = train.precision == half;
    const std::string key = half + ".enabled";
    check(key, "train.precision", enabled == wanted, enabled ? "true" : "false", train.precision);
    // A job file asking for fp16/bf16 with a ds_config silent about it would
    // train in fp32 (the Hugging Face Trainer lets this pass).
    if (wanted && !walk.Has(key)) {
      problems->At(source.file,
                   absl::StrCat("train.precision is ", half, " but ", source.key_prefix, key,
                                " is not set; set it to true or \"auto\""));
    }
  }
}

std::optional<GivenBatchSizes> BatchSizesFromWalk(const WalkResult& walk, const DsConfig& config,
                                                  const JobAutoSources* job) {
  for (const char* path :
       {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}) {
    if (walk.invalid.count(path)) return std::nullopt;
  }
  // A job-file batch size that "auto" would take was refused (out of bounds):
  // its problem is reported, and "no batch size" would only follow from it.
  if (job != nullptr && job->train_walk != nullptr) {
    for (const char* path : {"train.global_batch_size", "train.micro_batch_size"}) {
      if (job->train_walk->invalid.count(path)) return std::nullopt;
    }
  }
  auto read = [&](const char* path, int64_t value, int64_t job_value) -> std::optional<int64_t> {
    if (walk.IsAuto(path)) {
      if (job != nullptr && job_value > 0) return job_value;
      return std::nullopt;
    }
    if (walk.HasValue(path)) return value;
    return std::nullopt;
  };
  GivenBatchSizes given;
  given.train_batch_size =
      read("train_batch_size", config.train_batch_size, job ? job->train->global_batch_size : 0);
  given.micro_batch_size =
      read("train_micro_batch_size_per_gpu", config.train_micro_batch_size_per_gpu,
           job ? job->train->micro_batch_size : 0);
  // No job-file counterpart: "auto" accumulation is derived from the other two.
  given.gradient_accumulation_steps =
      read("gradient_accumulation_steps", config.gradient_accumulation_steps, 0);
  return given;
}

std::vector<std::string> ResolveBatchSizes(const GivenBatchSizes& given, int world_size,
                                           const std::string& key_prefix, DsConfig* config) {
  const std::string train_key = key_prefix + "train_batch_size";
  const std::string micro_key = key_prefix + "train_micro_batch_size_per_gpu";
  const std::string gas_key = key_prefix + "gradient_accumulation_steps";
  const int tp = config->tensor_parallel.tp_size;
  const int pp = config->pipeline.stages;
  if (world_size < 1) return {absl::StrCat("world size ", world_size, " must be >= 1")};
  if (world_size % (tp * pp) != 0) {
    return {absl::StrCat("world size ", world_size, " is not divisible by ", key_prefix,
                         "tensor_parallel.tp_size (", tp, ") * ", key_prefix, "pipeline.stages (",
                         pp, ")")};
  }
  const int64_t dp = world_size / (tp * pp);
  const std::string dp_text =
      tp * pp == 1
          ? absl::StrCat("data-parallel size (", dp, ")")
          : absl::StrCat("data-parallel size (", dp, " = world size ", world_size,
                         " / (tensor_parallel.tp_size ", tp, " * pipeline.stages ", pp, "))");
  const auto& train = given.train_batch_size;
  const auto& micro = given.micro_batch_size;
  const auto& gas = given.gradient_accumulation_steps;
  int64_t t = 0, m = 0, g = 0;
  if (train && micro && gas) {
    t = *train, m = *micro, g = *gas;
    if (t != m * g * dp) {
      return {absl::StrCat(train_key, " (", t, ") != ", micro_key, " (", m, ") * ", gas_key, " (",
                           g, ") * ", dp_text, " = ", m * g * dp)};
    }
  } else if (train && micro) {
    t = *train, m = *micro;
    if (t % (m * dp) != 0) {
      return {absl::StrCat(train_key, " (", t, ") is not divisible by ", micro_key, " (", m, ") * ",
                           dp_text, " = ", m * dp, ", so ", gas_key, " cannot be derived")};
    }
    g = t / (m * dp);
  } else if (train && gas) {
    t = *train, g = *gas;
    if (t % (g * dp) != 0) {
      return {absl::StrCat(train_key, " (", t, ") is not divisible by ", gas_key, " (", g, ") * ",
                           dp_text, " = ", g * dp, ", so ", micro_key, " cannot be derived")};
    }
    m = t / (g * dp);
  } else if (micro && gas) {
    m = *micro, g = *gas;
    t = m * g * dp;
  } else if (train) {
    t = *train, g = 1;
    if (t % dp != 0) {
      return {absl::StrCat(train_key, " (", t, ") is not divisible by the ", dp_text, ", so ",
                           micro_key, " cannot be derived")};
    }
    m = t / dp;
  } else if (micro) {
    m = *micro, g = 1;
    t = m * dp;
  } else {
    return {absl::StrCat(
        "no batch size: set ", train_key, " or ", micro_key, " (", gas_key,
        gas ? " alone is not enough" : " optional",
        "); \"auto\" takes train.global_batch_size / train.micro_batch_size from a job file")};
  }
  // The keys given are bounded by the schema; these are the derived ones.
  std::vector<std::string> too_large;
  auto bound = [&](const std::string& key, int64_t value, int64_t max, bool given_value) {
    if (!given_value && value > max) {
      too_large.push_back(absl::StrCat(key, " would be ", value, " (derived from the other batch sizes and the ",
                                       dp_text, "), more than ", max));
    }
  };
  bound(train_key, t, kMaxGlobalBatchSize, train.has_value());
  bound(micro_key, m, kMaxMicroBatchSize, micro.has_value());
  bound(gas_key, g, kMaxGradientAccumulationSteps, gas.has_value());
  if (!too_large.empty()) return too_large;
  config->train_batch_size = t;
  config->train_micro_batch_size_per_gpu = m;
  config->gradient_accumulation_steps = g;
  return {};
}

}  // namespace dslaunch::runtime::config_internal

#include "runtime/dsrank/flops_profiler.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <fstream>
#include <map>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {
namespace {

// DeepSpeed's number_to_string: "120.64 K", "1.3 G" (units of 1000).
std::string Number(double value, const std::string& unit = "") {
  static const char* const kPrefixes[] = {"", " K", " M", " G", " T", " P"};
  int prefix = 0;
  while (std::abs(value) >= 1000 && prefix < 5) {
    value /= 1000;
    ++prefix;
  }
  return absl::StrFormat("%.2f%s%s", value, prefix == 0 && !unit.empty() ? " " : kPrefixes[prefix], unit);
}

std::string Duration(double seconds) {
  if (seconds >= 1) return absl::StrFormat("%.2f s", seconds);
  if (seconds >= 1e-3) return absl::StrFormat("%.2f ms", seconds * 1e3);
  return absl::StrFormat("%.2f us", seconds * 1e6);
}

std::string Flops(double flops_per_second) { return Number(flops_per_second, "FLOPS"); }

std::string Percent(double part, double whole) {
  return absl::StrFormat("%.2f%%", whole > 0 ? 100 * part / whole : 0.0);
}

struct LayerProfile {
  std::string name;
  std::string type;
  int64_t params = 0;
  double macs = 0;
  double seconds = 0;
};

// Note [Flops profiler]: each layer's parameters and forward MACs for `batch`.
std::vector<LayerProfile> CountLayers(const ModelInterface& model, torch::nn::Module& module,
                                      const TokenBatch& batch) {
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& item : module.named_parameters()) by_name[item.key()] = item.value();
  const std::vector<ModelLayer> layers = model.Layers();
  std::map<std::string, std::vector<std::string>> used = {};  // layer → parameters it multiplies by
  for (const ModelLayer& layer : layers) used[layer.name] = layer.parameters;
  for (const TiedParameter& tied : model.TiedParameters()) {
    for (size_t i = 1; i < tied.layers.size(); ++i) used[tied.layers[i]].push_back(tied.parameter);
  }
  const double rows = static_cast<double>(batch.tokens.numel());
  const double time = static_cast<double>(batch.tokens.size(1));
  std::vector<LayerProfile> profiles;
  for (const ModelLayer& layer : layers) {
    LayerProfile profile{layer.name, layer.type};
    for (const std::string& name : layer.parameters) {
      if (auto it = by_name.find(name); it != by_name.end()) profile.params += it->second.numel();
    }
    int64_t width = 0;
    if (!absl::StrContains(layer.type, "Embedding")) {
      for (const std::string& name : used[layer.name]) {
        auto it = by_name.find(name);
        if (it == by_name.end() || it->second.dim() != 2) continue;
        profile.macs += rows * static_cast<double>(it->second.numel());
        if (width == 0) width = it->second.size(1);
      }
    }
    if (absl::EndsWith(layer.type, "Block")) profile.macs += 2 * rows * time * static_cast<double>(width);
    profiles.push_back(profile);
  }
  return profiles;
}

// "{'blocks.0': '1.2 K', ...}": the `top` largest by `key`.
template <typename Key, typename Format>
std::string Top(std::vector<LayerProfile> layers, int top, Key key, Format format) {
  std::stable_sort(layers.begin(), layers.end(),
                   [&](const LayerProfile& a, const LayerProfile& b) { return key(a) > key(b); });
  std::vector<std::string> items;
  for (int i = 0; i < top && i < static_cast<int>(layers.size()); ++i) {
    items.push_back(absl::StrCat("'", layers[i].name, "': '", format(key(layers[i])), "'"));
  }
  return absl::StrCat("{", absl::StrJoin(items, ", "), "}");
}

}  // namespace

absl::Status FlopsProfiler::Check(const JobConfig& job) {
  if (!job.ds.flops_profiler.enabled) return absl::OkStatus();
  auto refuse = [](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat("flops_profiler.enabled: not yet supported with ", why,
                                                      " (Note [Flops profiler])"));
  };
  if (job.ds.pipeline.stages > 1) return refuse("pipeline.stages > 1");
  if (job.model.moe.num_experts > 0) return refuse("model.moe: a token runs its top-k experts, not every matrix");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<FlopsProfiler>> FlopsProfiler::Create(const FlopsProfilerConfig& config,
                                                                     torch::Device device, int rank) {
  if (!config.enabled) return nullptr;
  // output_file: its folder made and the file opened now, so that a path
  // that cannot be written stops the job before it trains, not at profile_step.
  if (rank == 0 && !config.output_file.empty()) {
    const std::string& path = config.output_file;
    for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
      ::mkdir(path.substr(0, slash).c_str(), 0755);  // an error shows when the file cannot be opened
    }
    std::ofstream probe(path, std::ios::app);
    if (!probe) {
      return absl::PermissionDeniedError(absl::StrCat("flops_profiler.output_file: cannot write ", path, ": ",
                                                      std::strerror(errno)));
    }
  }
  return std::unique_ptr<FlopsProfiler>(new FlopsProfiler(config, device));
}

double FlopsProfiler::Now() const {
  compat::SynchronizeDevice(device_);
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

absl::Status FlopsProfiler::Report(int64_t step, const TokenBatch& batch, ModelInterface& model,
                                   torch::nn::Module& module, const ProfileShape& shape, int rank, std::FILE* out) {
  struct {
    double forward, backward, step, iteration;
  } times = {marks_[kForwardEnd] - marks_[kForwardBegin], marks_[kBackwardEnd] - marks_[kForwardEnd],
             marks_[kStepEnd] - marks_[kStepBegin], marks_[kStepEnd] - marks_[kForwardBegin]};
  std::vector<LayerProfile> layers = CountLayers(model, module, batch);
  {
    // Twice: the first pass warms up what a forward without gradients runs
    // for the first time (on the H200 it put 0.7 s of kernel set-up into the
    // first block's 0.8 ms); the second is timed.
    torch::NoGradGuard no_gradients;
    for (int pass = 0; pass < 2; ++pass) {
      torch::Tensor x;
      for (size_t i = 0; i < layers.size(); ++i) {
        const double start = Now();
        x = model.ForwardLayers(static_cast<int>(i), static_cast<int>(i), x, batch);
        layers[i].seconds = Now() - start;
      }
    }
  }
  if (rank != 0) return absl::OkStatus();

  const double params = static_cast<double>(model.ParameterCount());
  const double macs = std::accumulate(layers.begin(), layers.end(), 0.0,
                                      [](double sum, const LayerProfile& l) { return sum + l.macs; });
  const double layer_seconds = std::accumulate(layers.begin(), layers.end(), 0.0,
                                               [](double sum, const LayerProfile& l) { return sum + l.seconds; });
  const double flops = 2 * macs;
  const int64_t micro_batch = batch.tokens.size(0);
  auto row = [](const std::string& label, const std::string& value) {
    return absl::StrFormat("%-62s%s\n", label + ":", value);
  };
  std::string text = "\n-------------------------- DeepSpeed Flops Profiler --------------------------\n";
  absl::StrAppend(&text, "Profile Summary at step ", step, ":\n",
                  "Notations:\ndata parallel size (dp_size), model parallel size(mp_size),\n"
                  "number of parameters (params), number of multiply-accumulate operations(MACs),\n"
                  "number of floating-point operations (flops), floating-point operations per second (FLOPS),\n"
                  "fwd latency (forward propagation latency), bwd latency (backward propagation latency),\n"
                  "step (weights update latency), iter latency (sum of fwd, bwd and step latency)\n\n");
  absl::StrAppend(&text, row("world size", absl::StrCat(shape.world_size)),
                  row("data parallel size", absl::StrCat(shape.data_parallel_size)),
                  row("model parallel size", absl::StrCat(shape.model_parallel_size)),
                  row("batch size per GPU", absl::StrCat(micro_batch)), row("params per GPU", Number(params)),
                  row("params of model = params per GPU * mp_size", Number(params * shape.model_parallel_size)),
                  row("fwd MACs per GPU", Number(macs, "MACs")), row("fwd flops per GPU", Number(flops)),
                  row("fwd flops of model = fwd flops per GPU * mp_size", Number(flops * shape.model_parallel_size)),
                  row("fwd latency", Duration(times.forward)),
                  row("fwd FLOPS per GPU = fwd flops per GPU / fwd latency", Flops(flops / times.forward)),
                  row("bwd latency", Duration(times.backward)),
                  row("bwd FLOPS per GPU = 2 * fwd flops per GPU / bwd latency", Flops(2 * flops / times.backward)),
                  row("fwd+bwd FLOPS per GPU = 3 * fwd flops per GPU / (fwd+bwd latency)",
                      Flops(3 * flops / (times.forward + times.backward))),
                  row("step latency", Duration(times.step)), row("iter latency", Duration(times.iteration)),
                  row("samples/second", absl::StrFormat("%.2f", shape.global_batch / times.iteration)));

  const int top = config_.top_modules;
  absl::StrAppend(&text, "\n----------------------------- Aggregated Profile per GPU -----------------------------\n",
                  "Top ", top, " modules in terms of params, MACs or fwd latency at different model depths:\n");
  const std::string family = model.family();
  absl::StrAppend(&text, "depth 0:\n    params      - {'", family, "': '", Number(params), "'}\n",
                  "    MACs        - {'", family, "': '", Number(macs, "MACs"), "'}\n", "    fwd latency - {'",
                  family, "': '", Duration(layer_seconds), "'}\n");
  if (config_.module_depth != 0) {
    absl::StrAppend(
        &text, "depth 1:\n",
        "    params      - ", Top(layers, top, [](const LayerProfile& l) { return double(l.params); },
                                   [](double v) { return Number(v); }), "\n",
        "    MACs        - ", Top(layers, top, [](const LayerProfile& l) { return l.macs; },
                                   [](double v) { return Number(v, "MACs"); }), "\n",
        "    fwd latency - ", Top(layers, top, [](const LayerProfile& l) { return l.seconds; },
                                   [](double v) { return Duration(v); }), "\n");
  }
  if (config_.detailed) {
    absl::StrAppend(&text, "\n------------------------------ Detailed Profile per GPU ------------------------------\n",
                    "Each module profile is listed after its name in the following order:\n",
                    "params, percentage of total params, MACs, percentage of total MACs, fwd latency, percentage of "
                    "total fwd latency, fwd FLOPS\n\n");
    auto line = [&](double p, double m, double s) {
      return absl::StrCat(Number(p), " = ", Percent(p, params), " Params, ", Number(m, "MACs"), " = ",
                          Percent(m, macs), " MACs, ", Duration(s), " = ", Percent(s, layer_seconds), " latency, ",
                          Flops(s > 0 ? 2 * m / s : 0));
    };
    absl::StrAppend(&text, family, "(\n  ", line(params, macs, layer_seconds), "\n");
    if (config_.module_depth != 0) {
      for (const LayerProfile& layer : layers) {
        absl::StrAppend(&text, "  (", layer.name, "): ", layer.type, "(", line(double(layer.params), layer.macs,
                                                                              layer.seconds), ")\n");
      }
    }
    absl::StrAppend(&text, ")\n");
  }
  absl::StrAppend(&text, "------------------------------------------------------------------------------\n");
  if (config_.output_file.empty()) {
    std::fputs(text.c_str(), out);
    std::fflush(out);
    return absl::OkStatus();
  }
  std::ofstream file(config_.output_file);
  file << text;
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat("flops_profiler.output_file: cannot write ", config_.output_file));
  absl::FPrintF(out, "dsrank: flops profile of step %d written to %s\n", step, config_.output_file);
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime

#include "runtime/estimate/estimate_report.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dslaunch::runtime {
namespace {

std::string Gib(int64_t bytes) { return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30)); }

std::string Grouped(int64_t value) {
  std::string digits = absl::StrCat(value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::string EstimateReport(const EstimateRequest& r) {
  const ModelSize& m = r.model;
  const int64_t world = static_cast<int64_t>(r.gpus_per_node) * r.nodes;
  std::string out = absl::StrCat("dslaunch estimate: ", m.description, "\n  ", Grouped(m.trainable),
                                 " trainable parameters");
  if (m.frozen > 0) absl::StrAppend(&out, " (", Grouped(m.frozen), " frozen)");
  absl::StrAppend(&out, ", largest layer ", Grouped(m.largest_layer), "; ", r.precision, "; ", r.nodes,
                  r.nodes == 1 ? " node" : " nodes", " x ", r.gpus_per_node, r.gpus_per_node == 1 ? " GPU" : " GPUs",
                  " (", world, world == 1 ? " rank" : " ranks", " of data parallelism)\n\n");

  const ActivationEstimate activations = ActivationsPerSample(m, r.compute_bytes, r.attention_scores_kept);
  // Without a shape (a bare parameter count) there are no activations to size.
  const bool shaped = m.layers > 0 && m.sequence_length > 0;
  const int64_t gpu_bytes = shaped ? static_cast<int64_t>(r.gpu_memory_gib * (int64_t{1} << 30)) : 0;
  absl::StrAppend(&out, "Model states of this runtime (Engine::Memory()'s categories; per host: the ",
                  r.gpus_per_node, " rank(s) of a node):\n");
  absl::StrAppend(&out, "| ZeRO | offload | per GPU | per host | on NVMe per host |");
  if (gpu_bytes > 0) {
    absl::StrAppend(&out, absl::StrFormat(" largest micro batch on %g GiB (checkpointed) |", r.gpu_memory_gib));
  }
  absl::StrAppend(&out, "\n|---|---|---|---|---|", gpu_bytes > 0 ? "---|" : "", "\n");
  struct Row {
    ZeroSetting setting;
    const char* offload;
  };
  // ZeRO-Infinity's rows: the optimizer (and at stage 3 the parameters) on NVMe.
  auto nvme = [](int stage, bool optimizer_nvme, bool params, bool param_nvme) {
    ZeroSetting setting{stage, true, params};
    setting.optimizer_nvme = optimizer_nvme;
    setting.param_nvme = param_nvme;
    return setting;
  };
  const std::vector<Row> rows = {
      {{0, false, false}, "none"},
      {{1, false, false}, "none"},
      {{1, true, false}, "optimizer"},
      {nvme(1, true, false, false), "optimizer (NVMe)"},
      {{2, false, false}, "none"},
      {{2, true, false}, "optimizer"},
      {nvme(2, true, false, false), "optimizer (NVMe)"},
      {{3, false, false}, "none"},
      {{3, true, false}, "optimizer"},
      {{3, true, true}, "optimizer, parameters"},
      {nvme(3, true, false, false), "optimizer (NVMe)"},
      {nvme(3, false, true, true), "optimizer, parameters (NVMe)"},
      {nvme(3, true, true, true), "optimizer (NVMe), parameters (NVMe)"},
  };
  for (Row row : rows) {
    row.setting.delay_update = r.delay_update && row.setting.offload_optimizer && !row.setting.optimizer_nvme &&
                               !row.setting.param_nvme;  // refused beside NVMe
    row.setting.bf16 = r.precision == "bf16";
    const RankStates states = DslaunchRankStates(m, row.setting, world, r.compute_bytes);
    absl::StrAppend(&out, "| ", row.setting.stage, " | ", row.offload, " | ", Gib(states.Device()), " | ",
                    Gib(states.Host() * r.gpus_per_node), " | ", Gib(states.Nvme() * r.gpus_per_node), " |");
    if (gpu_bytes > 0) {
      absl::StrAppend(&out, " ", LargestMicroBatch(gpu_bytes, states.Device(), activations.per_sample), " (",
                      LargestMicroBatch(gpu_bytes, states.Device(), activations.per_sample_checkpointed), ") |");
    }
    absl::StrAppend(&out, "\n");
  }

  absl::StrAppend(&out, "\nDeepSpeed's estimators (estimate_zero2/zero3_model_states_mem_needs, "
                        "additional_buffer_factor ",
                  absl::StrFormat("%g", r.additional_buffer_factor), "):\n| ZeRO | options | per GPU | per CPU |\n"
                  "|---|---|---|---|\n");
  const int64_t psi = m.trainable;
  for (bool offload : {true, false}) {
    const DeviceAndHost e = DeepSpeedZero2Estimate(psi, r.gpus_per_node, r.nodes, offload, r.additional_buffer_factor);
    absl::StrAppend(&out, "| 2 | offload_optimizer=", offload ? "cpu" : "none", " | ", Gib(e.per_gpu), " | ",
                    Gib(e.per_host), " |\n");
  }
  for (bool offload : {true, false}) {
    for (bool offload_params : {true, false}) {
      if (!offload && offload_params) continue;
      for (bool zero_init : {true, false}) {
        const DeviceAndHost e = DeepSpeedZero3Estimate(psi, m.largest_layer, r.gpus_per_node, r.nodes, offload,
                                                       offload_params, zero_init, r.additional_buffer_factor);
        absl::StrAppend(&out, "| 3 | offload_param=", offload_params ? "cpu" : "none",
                        ", offload_optimizer=", offload ? "cpu" : "none", ", zero_init=", zero_init ? 1 : 0, " | ",
                        Gib(e.per_gpu), " | ", Gib(e.per_host), " |\n");
      }
    }
  }

  if (!shaped) {
    absl::StrAppend(&out, "\nActivations: not estimated without the model's shape (give --model JOB.cfg).\n");
    return out;
  }
  absl::StrAppend(&out, "\nActivations per GPU, micro batch ", r.micro_batch, " x sequence ", m.sequence_length,
                  " (Korthikanti et al.; ", r.attention_scores_kept ? "attention scores kept" : "fused attention",
                  "): ", Gib(activations.per_sample * r.micro_batch), " without activation checkpointing, ",
                  Gib(activations.per_sample_checkpointed * r.micro_batch), " with every block checkpointed\n");
  if (gpu_bytes > 0) {
    absl::StrAppend(&out, "The largest micro batch leaves ", Gib(kGpuReserveBytes),
                    " of each GPU for the CUDA context, workspaces and fragmentation.\n");
  }
  return out;
}

}  // namespace dslaunch::runtime

#include "runtime/estimate/memory_estimate.h"

#include <algorithm>

#include "runtime/offload/swap_sizes.h"

namespace dslaunch::runtime {

int64_t RankStates::Device() const {
  int64_t bytes = gradients + gathered_working;
  if (!parameters_on_host && !parameters_on_nvme) bytes += parameters + frozen_parameters;
  if (!optimizer_on_host && !optimizer_on_nvme) bytes += master_weights + optimizer_state;
  return bytes;
}

int64_t RankStates::Host() const {
  int64_t bytes = host_gradient + host_parameter_copy + swap_buffers + parameter_staging;
  if (parameters_on_host) bytes += parameters + frozen_parameters;
  if (optimizer_on_host) bytes += master_weights + optimizer_state;
  return bytes;
}

RankStates DslaunchRankStates(const ModelSize& model, const ZeroSetting& setting, int64_t world, int compute_bytes) {
  const int64_t psi = model.trainable, n = std::max<int64_t>(1, world), k = compute_bytes;
  const int stage = setting.stage;
  RankStates r;
  r.parameters = stage == 3 ? k * psi / n : k * psi;
  r.gradients = stage >= 2 ? k * psi / n : k * psi;
  r.master_weights = stage == 0 ? (k == 4 ? 0 : 4 * psi) : 4 * psi / n;
  r.optimizer_state = stage == 0 ? 8 * psi : 8 * psi / n;
  // Note [Frozen parameters at ZeRO-3]: stage 3 partitions LoRA's base too.
  r.frozen_parameters = stage == 3 ? k * model.frozen / n : k * model.frozen;
  r.optimizer_on_host = setting.offload_optimizer && stage >= 1;
  r.parameters_on_host = setting.offload_param && stage == 3;
  if (r.optimizer_on_host) r.host_gradient = 4 * psi / n * (setting.delay_update ? 2 : 1);
  if (r.optimizer_on_host && setting.bf16 && !(r.parameters_on_host && !setting.delay_update)) {
    r.host_parameter_copy = 2 * psi / n;
  }
  if (stage == 3) r.gathered_working = 3 * k * model.block;
  const int64_t shard = (psi + n - 1) / n;
  if (setting.offload_optimizer && setting.optimizer_nvme && stage >= 1) {
    // Note [NVMe offload], Note [Sub-groups on NVMe].
    r.optimizer_on_host = false;
    r.optimizer_on_nvme = true;
    const int64_t group = std::max<int64_t>(
        1, std::min({setting.sub_group_elements, kMaxSwapSubGroupElements, std::max<int64_t>(1, shard)}));
    const int64_t groups = (shard + group - 1) / group, last = shard - (groups - 1) * group;
    r.swapped_to_nvme = 3 * ((groups - 1) * SwapFileBytes(group) + SwapFileBytes(last));
    const int64_t sets = std::min<int64_t>(kSwapBufferSets, groups);
    r.swap_buffers = sets * 3 * (SwapFileBytes(group) + (last != group ? SwapFileBytes(last) : 0));
    r.host_gradient = 4 * shard;
    // Stages 1-2 keep the updated parameters on the host for the gathers;
    // stage 3 stores them into its parameter shard.
    r.host_parameter_copy = stage < 3 ? k * shard : 0;
  }
  if (setting.offload_param && setting.param_nvme && stage == 3) {
    // Note [Parameters on NVMe]: the shards of the trainable and frozen
    // parameters in files, a block's piece per staging buffer.
    r.parameters_on_host = false;
    r.parameters_on_nvme = true;
    const auto piece_file = [](int64_t bytes) { return SwapFileBytes((bytes + 3) / 4); };
    r.parameter_files = piece_file(k * shard) + (model.frozen > 0 ? piece_file(k * ((model.frozen + n - 1) / n)) : 0);
    r.parameter_staging = 2 * piece_file(k * ((model.block + n - 1) / n));
    // The CPU Adam's rounded copy, which the update stores from.
    r.host_parameter_copy = r.optimizer_on_host && setting.bf16 ? 2 * shard : 0;
  }
  return r;
}

DeviceAndHost DeepSpeedZero2Estimate(int64_t total_params, int gpus_per_node, int nodes, bool cpu_offload,
                                     double additional_buffer_factor) {
  const double psi = static_cast<double>(total_params);
  const int64_t total_gpus = static_cast<int64_t>(nodes) * gpus_per_node;
  DeviceAndHost m;
  if (cpu_offload) {
    m.per_gpu = 2 * total_params;
    m.per_host = static_cast<int64_t>(psi * std::max<double>(4.0 * total_gpus, 16.0) * additional_buffer_factor);
  } else {
    m.per_gpu = 4 * total_params + static_cast<int64_t>(16.0 * psi / total_gpus);
    m.per_host = static_cast<int64_t>(psi * 4.0 * gpus_per_node * additional_buffer_factor);
  }
  return m;
}

DeviceAndHost DeepSpeedZero3Estimate(int64_t total_params, int64_t largest_layer_params, int gpus_per_node,
                                     int nodes, bool cpu_offload, bool cpu_offload_params, bool zero_init,
                                     double additional_buffer_factor) {
  const double psi = static_cast<double>(total_params);
  const double total_gpus = static_cast<double>(nodes) * gpus_per_node;
  const double gpus_factor = 1.0 / nodes;
  const int64_t largest_layer_memory = 4 * largest_layer_params;
  DeviceAndHost m;
  double host = 0;
  if (cpu_offload) {
    const double per_param = cpu_offload_params ? 18.0 : 16.0;
    m.per_gpu = largest_layer_memory + (cpu_offload_params ? 0 : static_cast<int64_t>(2.0 * psi / total_gpus));
    host = zero_init ? psi * per_param * gpus_factor
                     : psi * std::max(4.0 * gpus_per_node, per_param * gpus_factor);
  } else {
    m.per_gpu = largest_layer_memory + static_cast<int64_t>(18.0 * psi / total_gpus);
    host = zero_init ? static_cast<double>(largest_layer_params) * 4.0 * gpus_per_node : psi * 4.0 * gpus_per_node;
  }
  m.per_host = static_cast<int64_t>(host * additional_buffer_factor);
  return m;
}

ActivationEstimate ActivationsPerSample(const ModelSize& model, int compute_bytes, bool attention_scores_kept) {
  const int64_t s = model.sequence_length, h = model.hidden, a = model.heads, v = model.vocab;
  // Korthikanti et al.'s bytes per layer assume 16-bit activations.
  int64_t layer = 34 * s * h + (attention_scores_kept ? 5 * a * s * s : 0);
  layer = layer * compute_bytes / 2;
  const int64_t logits = s * v * (compute_bytes + 4);
  ActivationEstimate e;
  e.per_sample = model.layers * layer + logits;
  e.per_sample_checkpointed = model.layers * compute_bytes * s * h + layer + logits;
  return e;
}

int64_t LargestMicroBatch(int64_t gpu_bytes, int64_t device_bytes, int64_t per_sample) {
  const int64_t free = gpu_bytes - kGpuReserveBytes - device_bytes;
  if (free <= 0 || per_sample <= 0) return 0;
  return free / per_sample;
}

}  // namespace dslaunch::runtime

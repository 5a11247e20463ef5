// The memory a training job needs, before it runs: `dslaunch estimate`.
//
// Note [Memory estimate]
// Model states, per rank, as this runtime holds them (Engine::Memory()
// reports the same four categories; zero_tests checks them against it at
// ZeRO 0-3 and 1, 2 and 4 ranks). Ψ trainable parameters, N data-parallel
// ranks, k bytes per compute element (2 with bf16/fp16, 4 with fp32), Adam:
//   parameters       kΨ, kΨ/N at stage 3
//   gradients        kΨ, kΨ/N from stage 2 (the shard accumulator)
//   master weights   stage 0: 4Ψ with 16-bit compute, none with fp32
//                    (the parameters are the masters); stages 1-3: 4Ψ/N
//   optimizer state  8Ψ, 8Ψ/N from stage 1 (two fp32 moments)
// which for bf16 is DeepSpeed's 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N and 16Ψ/N.
// offload_optimizer.device=cpu moves the masters and moments to the host
// and adds the pinned fp32 gradient shard there (4Ψ/N; twice that with
// delay_update, Note [Delayed parameter update]); with bf16 also the bf16
// copy the CPU Adam writes (2Ψ/N; at stage 3 with offload_param it is the
// parameter shard itself, so nothing more, unless delay_update needs a
// second shard); offload_param (stage 3) moves the parameter shard too.
// With the optimizer on NVMe the masters and moments go to swap files
// (12Ψ/N on the drive) and the host keeps the fp32 gradient shard, three
// buffer sets of one sub-group (36 bytes per element of a sub-group) and, at
// stages 1-2, the updated parameters for the gathers (kΨ/N); with the
// parameters on NVMe the shard goes to files (kΨ/N) through two staging
// buffers of a block's piece, and with the optimizer on the host in bf16 the
// CPU Adam's copy stays (2Ψ/N). Frozen parameters (LoRA's base) are held
// whole in the compute dtype on every GPU. Every unit is padded to a
// multiple of N elements, so a real rank holds up to N elements per unit
// more. Stage 3 also holds gathered units while it computes: two blocks
// (the one in use and the one prefetched) and one block's full gradient
// before it is reduce-scattered.
//
// DeepSpeed's own estimators (estimate_zero2_model_states_mem_needs and
// estimate_zero3_model_states_mem_needs, the functions behind its
// *_all_live and *_all_cold helpers) are reproduced as published, with their
// additional_buffer_factor (1.5) on host memory, so a user can compare.
//
// Activations per sample (micro batch 1) follow Korthikanti et al.,
// "Reducing Activation Recomputation in Large Transformer Models": a layer
// keeps s·h·34 bytes with 16-bit activations, plus 5·a·s² when the
// attention scores are materialised (LibTorch without a fused attention
// kernel; not with SDPA/flash), scaled by k/2 for fp32. The logits keep
// s·V·(k + 4) (the compute-dtype logits and the fp32 log-softmax). With
// activation checkpointing of every block, each layer keeps its input
// (k·s·h) and one layer at a time is recomputed whole. These are estimates
// of what autograd keeps alive, not measured bounds; the allocator's
// fragmentation and the CUDA context come on top (kGpuReserveBytes).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/estimate/model_size.h"

namespace dslaunch::runtime {

// Left free on a GPU for the CUDA context, cuBLAS/NCCL workspaces and the
// caching allocator's fragmentation, when finding the largest micro batch.
inline constexpr int64_t kGpuReserveBytes = int64_t{2} << 30;

struct ZeroSetting {
  int stage = 0;
  bool offload_optimizer = false;
  bool offload_param = false;  // stage 3 only
  bool delay_update = false;   // with offload_optimizer
  // bf16 compute with offload_optimizer: the CPU Adam also writes the rounded
  // parameters into a host buffer (Note [bf16 parameters from the host step]).
  bool bf16 = false;
  // ZeRO-Infinity (Note [NVMe offload], Note [Parameters on NVMe]):
  // offload_optimizer.device nvme (with offload_optimizer), and at stage 3
  // offload_param.device nvme (with offload_param); the swap's sub-groups
  // (zero_optimization.sub_group_size, cut at kMaxSwapSubGroupElements).
  bool optimizer_nvme = false;
  bool param_nvme = false;
  int64_t sub_group_elements = 1'000'000'000;
};

// One rank's model states (Note [Memory estimate]), by Engine::Memory()'s
// categories, and where they are.
struct RankStates {
  int64_t parameters = 0, gradients = 0, master_weights = 0, optimizer_state = 0;
  // LoRA's base in the compute dtype: whole, or 1/N of it at stage 3 (with
  // the parameters on the host under offload_param).
  int64_t frozen_parameters = 0;
  int64_t host_gradient = 0;     // the pinned fp32 gradient shard of offload
  // bf16 with offload_optimizer: the host buffer the CPU Adam writes the
  // rounded parameters into, 2Ψ/N; none at stage 3 with offload_param, where
  // it is the parameter shard itself, unless delay_update needs a second one.
  int64_t host_parameter_copy = 0;
  int64_t gathered_working = 0;  // stage 3: gathered blocks and their gradients
  bool optimizer_on_host = false, parameters_on_host = false;
  // NVMe offload: the masters and moments in swap files (3 per sub-group),
  // the host buffer sets they stream through; the parameter shard's files and
  // their two staging buffers (as large as a block's piece). Bytes on the
  // drive, headers and padding included (Engine::Memory()'s swapped_to_nvme,
  // swap_buffers, parameters_on_nvme and parameter_staging).
  bool optimizer_on_nvme = false, parameters_on_nvme = false;
  int64_t swapped_to_nvme = 0, swap_buffers = 0, parameter_files = 0, parameter_staging = 0;
  int64_t Device() const;
  int64_t Host() const;
  int64_t Nvme() const { return swapped_to_nvme + parameter_files; }
};

RankStates DslaunchRankStates(const ModelSize& model, const ZeroSetting& setting, int64_t world, int compute_bytes);

// DeepSpeed's estimates: (per GPU, per host CPU) bytes.
struct DeviceAndHost {
  int64_t per_gpu = 0;
  int64_t per_host = 0;
};
DeviceAndHost DeepSpeedZero2Estimate(int64_t total_params, int gpus_per_node, int nodes, bool cpu_offload,
                                     double additional_buffer_factor = 1.5);
DeviceAndHost DeepSpeedZero3Estimate(int64_t total_params, int64_t largest_layer_params, int gpus_per_node,
                                     int nodes, bool cpu_offload, bool cpu_offload_params, bool zero_init,
                                     double additional_buffer_factor = 1.5);

// Activation bytes per sample of sequence model.sequence_length.
struct ActivationEstimate {
  int64_t per_sample = 0;               // no activation checkpointing
  int64_t per_sample_checkpointed = 0;  // every block checkpointed
};
ActivationEstimate ActivationsPerSample(const ModelSize& model, int compute_bytes, bool attention_scores_kept);

// The largest micro batch whose activations fit beside `device_bytes` of
// states in `gpu_bytes` (less kGpuReserveBytes); 0 when none does.
int64_t LargestMicroBatch(int64_t gpu_bytes, int64_t device_bytes, int64_t per_sample);

}  // namespace dslaunch::runtime

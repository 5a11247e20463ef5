#include "runtime/engine/engine.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/rank_contract.h"
#include "common/status_macros.h"
#include "kernels/cpu_adam.h"
#include "kernels/cuda/fused_adamw_types.h"
#include "runtime/model/model_interface.h"
#include "runtime/torch_compat.h"
#include "runtime/model/parameter_units.h"
#include "runtime/moe/moe_layer.h"

namespace dslaunch::runtime {
namespace {

template <typename Options>
void SetLrAndBetas(Options& options, double lr, std::optional<double> beta1, std::optional<double> beta2) {
  options.lr(lr);
  auto betas = options.betas();
  if (beta1) std::get<0>(betas) = *beta1;
  if (beta2) std::get<1>(betas) = *beta2;
  options.betas(betas);
}

}  // namespace

Engine::Engine(std::shared_ptr<torch::nn::Module> model, const DsConfig& config,
               std::shared_ptr<const ParallelState> parallel, torch::Device device,
               std::optional<PipelineStageRole> stage)
    : model_(std::move(model)),
      config_(config),
      parallel_(std::move(parallel)),
      data_parallel_(parallel_->data()),
      device_(device),
      stage_(std::move(stage)) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::shared_ptr<torch::nn::Module> model, const DsConfig& config,
                                                       std::shared_ptr<const ParallelState> parallel,
                                                       torch::Device device, std::optional<PipelineStageRole> stage,
                                                       const ParameterSource* deferred) {
  if (parallel == nullptr) return absl::InvalidArgumentError("Engine::Create: no ParallelState");
  const ProcessTopology& grid = parallel->topology();
  if (parallel->expert_size() > 1) {
    if (config.zero_optimization.stage == 3) {
      return absl::InvalidArgumentError(absl::StrCat("zero_optimization.stage=3 with expert parallelism (",
                                                     parallel->Describe(),
                                                     "): ZeRO-3 gathers each block's parameters over the "
                                                     "data-parallel group, but an expert block's experts "
                                                     "differ across the expert-parallel group; use stage 1 "
                                                     "or 2 (the experts' optimizer state is then "
                                                     "partitioned over the expert-data-parallel group)"));
    }
    if (stage) {
      return absl::InvalidArgumentError("expert parallelism with pipeline stages is not yet supported");
    }
  }
  if (grid.pipe_size() > 1 && !stage) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this rank's groups are ", parallel->Describe(),
        ": with pipeline stages the engine is created by runtime/pipeline (PipelineEngine), which cuts the model"));
  }
  if (stage && config.zero_optimization.stage == 3) {
    return absl::InvalidArgumentError(
        "zero_optimization.stage=3 with pipeline.stages > 1: ZeRO-3 gathers each layer for every micro-batch "
        "pass, which a pipeline's interleaved passes would repeat per micro-batch; use stage 1 or 2 (both "
        "partition the optimizer state, stage 2 the gradients too)");
  }
  if (config.zero_optimization.stage < 0 || config.zero_optimization.stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("zero_optimization.stage=", config.zero_optimization.stage, ": ZeRO stages are 0, 1, 2 and 3"));
  }
  if (config.gradient_accumulation_steps < 1) {
    return absl::InvalidArgumentError("gradient_accumulation_steps must be at least 1");
  }
  std::unique_ptr<Engine> engine(new Engine(std::move(model), config, std::move(parallel), device, std::move(stage)));
  absl::Status ready = engine->Initialize(deferred);
  if (!ready.ok()) return ready;
  return engine;
}

absl::Status Engine::Initialize(const ParameterSource* deferred) {
  try {
    if (config_.fp16.enabled) compute_dtype_ = torch::kHalf;
    if (config_.bf16.enabled) compute_dtype_ = torch::kBFloat16;
    const int stage = config_.zero_optimization.stage;
    // Note [Shard-only loading]: deferred parameters take the compute dtype
    // and stay without memory until the partitions fill them.
    std::vector<std::string> deferred_names;
    for (const auto& item : model_->named_parameters()) {
      if (IsDeferredParameter(item.value())) deferred_names.push_back(item.key());
    }
    if (deferred_names.empty()) {
      model_->to(device_, compute_dtype_);
    } else {
      if (stage != 3 || deferred == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            "parameter '", deferred_names.front(), "'", deferred_names.size() > 1 ? absl::StrCat(" (and ", deferred_names.size() - 1, " more)") : "",
            " is deferred (built without values, Note [Shard-only loading]): only a ZeRO-3 engine given their "
            "source fills deferred parameters (zero_optimization.stage=", stage,
            deferred == nullptr ? ", no source)" : ")"));
      }
      // Module::to, leaving the deferred parameters without memory.
      torch::NoGradGuard no_grad;
      for (const std::shared_ptr<torch::nn::Module>& module : model_->modules(/*include_self=*/true)) {
        for (torch::Tensor& p : module->parameters(/*recurse=*/false)) {
          p.set_data(IsDeferredParameter(p) ? DeferredTensor(p.sizes(), p.options().device(device_).dtype(compute_dtype_))
                                            : p.to(device_, compute_dtype_));
        }
        for (torch::Tensor& b : module->buffers(/*recurse=*/false)) b.set_data(b.to(device_, compute_dtype_));
      }
    }
    // Note [Mixed precision] with stage 0 also goes through the flat
    // partition (one range): its fp32 master is one tensor, stepped at once.
    // With tensor parallelism too: its checkpoints re-cut the flat state
    // (EngineCheckpointer), whatever the stage and precision; and with a
    // pipeline, whose norm the flat step sums over the stages.
    // With expert parallelism too: the experts have a partition of their own.
    const bool experts_apart = parallel_->expert() != nullptr;
    // A model with experts always: its checkpoints then load at any expert-
    // parallel size (Note [Expert-parallel checkpoints]).
    bool has_experts = false;
    for (const auto& item : model_->named_parameters()) has_experts = has_experts || IsExpertParameter(item.key());
    const bool flat = stage > 0 || compute_dtype_ != torch::kFloat || parallel_->tensor() != nullptr ||
                      stage_.has_value() || has_experts;
    std::vector<std::string> trainable_names, frozen_names;  // for the deferred values
    for (auto& item : model_->named_parameters()) {
      torch::Tensor& p = item.value();
      if (!p.requires_grad()) {
        frozen_params_.push_back(p);
        frozen_names.push_back(item.key());
        continue;
      }
      if (experts_apart && IsExpertParameter(item.key())) {
        expert_names_.push_back(item.key());
        expert_params_.push_back(p);
        continue;
      }
      model_params_.push_back(p);
      trainable_names.push_back(item.key());
      if (flat) continue;  // the partition holds the masters
      if (compute_dtype_ == torch::kFloat) {
        master_params_.push_back(p);
      } else {
        // Note [Mixed precision]: the fp32 master is what the optimizer sees.
        master_params_.push_back(p.detach().to(torch::kFloat).clone().requires_grad_(true));
      }
    }
    if (parallel_->tensor() != nullptr || stage_) {
      absl::Status counted = DecideNormCounts();
      if (!counted.ok()) return counted;
    }
    const std::string type = absl::AsciiStrToLower(config_.optimizer.type);
    const auto& o = config_.optimizer;
    const bool decoupled = type == "adamw" || (type == "adam" && o.adam_w_mode);
    if (type != "adam" && type != "adamw") {
      return absl::UnimplementedError(
          absl::StrCat("optimizer.type=", o.type, ": only Adam and AdamW are supported so far"));
    }
    const std::string& offload = config_.zero_optimization.offload_optimizer.device;
    const std::string& offload_param = config_.zero_optimization.offload_param.device;
    if (offload != "none" && stage == 0) {
      return absl::InvalidArgumentError(absl::StrCat("zero_optimization.offload_optimizer.device=", offload,
                                                     " needs zero_optimization.stage 1, 2 or 3"));
    }
    if (offload_param != "none" && stage != 3) {
      return absl::InvalidArgumentError(absl::StrCat("zero_optimization.offload_param.device=", offload_param,
                                                     " needs zero_optimization.stage 3"));
    }
    // Note [Delayed parameter update].
    delay_update_ = config_.zero_optimization.offload_optimizer.delay_update;
    if (delay_update_ && offload != "cpu") {
      return absl::InvalidArgumentError(absl::StrCat(
          "zero_optimization.offload_optimizer.delay_update needs offload_optimizer.device=cpu (it is ", offload, ")"));
    }
    if (delay_update_ && offload_param == "nvme") {
      return absl::InvalidArgumentError(
          "zero_optimization.offload_optimizer.delay_update with offload_param.device=nvme: the delayed host step "
          "runs while the forward reads the parameters, and both would use the parameter files (Note [Parameters "
          "on NVMe]); use offload_param.device=cpu, or turn delay_update off");
    }
    if (delay_update_ && experts_apart) {
      return absl::UnimplementedError(
          "zero_optimization.offload_optimizer.delay_update with expert parallelism is not yet supported");
    }
    if (delay_update_ && stage_) {
      return absl::UnimplementedError(
          "zero_optimization.offload_optimizer.delay_update with pipeline stages is not yet supported");
    }
    if (flat) {
      ZeroOptions options;
      options.stage = stage;
      options.offload_optimizer = offload == "cpu" || offload == "nvme";
      options.offload_param = offload_param == "cpu" || offload_param == "nvme";
      options.host_step_beside_forward = delay_update_;
      // Note [NVMe offload]: one swap folder per rank and job, so that two
      // jobs (or ranks) sharing nvme_path never meet.
      const char* job = std::getenv(rank_env::kJobId);
      const Communicator* world = parallel_->world();
      const std::string swap_name =
          absl::StrCat(job != nullptr && *job != '\0' ? job : "job", "-rank", world ? world->rank() : 0);
      BlockIoOptions io;
      io.block_bytes = config_.aio.block_size;
      io.queue_depth = config_.aio.queue_depth;
      io.thread_count = config_.aio.thread_count;
      io.use_io_uring = std::getenv(rank_env::kNoIoUring) == nullptr;
      if (offload_param == "nvme") {
        // Note [Parameters on NVMe].
        SwappedPiecesOptions files;
        files.nvme_path = config_.zero_optimization.offload_param.nvme_path;
        files.path_setting = "zero_optimization.offload_param.nvme_path";
        files.name = swap_name + "-params";
        files.io = io;
        options.nvme_param = files;
        // The trainable shard's first units take from max_in_cpu first, a
        // frozen base what is left (below).
        options.nvme_param_elements_in_memory = config_.zero_optimization.offload_param.max_in_cpu;
      }
      if (offload == "nvme") {
        SwappedShardOptions nvme;
        nvme.nvme_path = config_.zero_optimization.offload_optimizer.nvme_path;
        nvme.name = swap_name;
        // Note [Sub-groups on NVMe].
        nvme.sub_group_elements = std::min(config_.zero_optimization.sub_group_size, kMaxSwapSubGroupElements);
        nvme.io = io;
        options.nvme = nvme;
      }
      // reduce_bucket_size cuts the vector for stages 1-2 (each bucket reduced
      // and gathered on its own; no temporary copy larger than a bucket).
      options.bucket_elements = config_.zero_optimization.reduce_bucket_size;
      options.norm_counts = norm_counts_;
      if (options.offload_optimizer) {
        absl::Status simd = kernels::CpuAdamInit();
        if (!simd.ok()) return simd;
      }
      PartitionedModel* partitioned = dynamic_cast<PartitionedModel*>(model_.get());
      // overlap_comm at stage 2: with the model's units as buckets, each
      // unit's gradients are reduced while the rest of backward runs. One
      // rank has nothing to overlap, and moving each unit's gradients into
      // the accumulator during backward would cost it the in-place step.
      // With the optimizer offloaded there is no in-place step, and each
      // unit's gradients go down to the host as soon as they are reduced
      // (Note [Gradients to the host during backward]), at any rank count.
      const bool several_ranks = data_parallel_ != nullptr && data_parallel_->size() > 1;
      // A pipeline reduces once per step, after all micro-batches.
      options.overlap_units = stage == 2 && partitioned != nullptr && !stage_ && !experts_apart &&
                              ((config_.zero_optimization.overlap_comm && several_ranks) || options.offload_optimizer);
      std::vector<ParameterUnit> units;
      if (options.overlap_units) units = partitioned->ParameterUnits();
      if (stage == 3) {
        if (partitioned == nullptr) {
          return absl::InvalidArgumentError(
              "zero_optimization.stage=3 needs a model that names its parameter units "
              "(implement dslaunch::runtime::PartitionedModel, runtime/model/parameter_units.h); "
              "this model does not: use stage 2, or wrap its layers as units");
        }
        units = partitioned->ParameterUnits();
        options.persistence_threshold = config_.zero_optimization.stage3_param_persistence_threshold;
      }
      options.units = TrainableSide(units);
      if (!units.empty() && options.units.empty()) {
        // One root unit of everything would never be gathered by the model's runs.
        return absl::InvalidArgumentError(absl::StrCat(
            "zero_optimization.stage=", stage, ": the model has ", model_params_.size(),
            " trainable parameters, but its units (PartitionedModel::ParameterUnits, "
            "runtime/model/parameter_units.h) name none of them (ParameterUnit::parameter_count)"));
      }
      // Note [Shard-only loading]: each partition reads its parameters by name.
      auto values_of = [&](std::vector<std::string> names) {
        DeferredValues values;
        values.device = device_;
        values.read = [deferred, names = std::move(names)](size_t parameter, int64_t offset, torch::Tensor out) {
          return deferred->Read(names[parameter], offset, std::move(out));
        };
        return values;
      };
      const DeferredValues trainable_values = values_of(trainable_names);
      const DeferredValues frozen_values = values_of(frozen_names);
      auto zero = ZeroPartition::Create(options, model_params_, data_parallel_,
                                        deferred != nullptr ? &trainable_values : nullptr);
      if (!zero.ok()) return zero.status();
      zero_ = std::move(*zero);
      if (stage == 3 && !frozen_params_.empty()) {
        // Note [Frozen parameters at ZeRO-3].
        ZeroOptions frozen = options;
        frozen.frozen = true;
        frozen.offload_optimizer = false;
        frozen.nvme.reset();
        if (frozen.nvme_param) {
          frozen.nvme_param->name += "-frozen";
          const SwappedPieces* trainable = zero_->parameter_files();
          const int64_t used =
              trainable != nullptr ? trainable->resident_bytes() / model_params_.front().element_size() : 0;
          frozen.nvme_param_elements_in_memory = std::max<int64_t>(0, options.nvme_param_elements_in_memory - used);
        }
        frozen.norm_counts.clear();
        frozen.units = FrozenSide(units);
        if (!units.empty() && frozen.units.empty()) {
          // One unit of everything would never be gathered by the model's runs.
          return absl::InvalidArgumentError(absl::StrCat(
              "zero_optimization.stage=3: the model has ", frozen_params_.size(),
              " frozen parameters, but its units (PartitionedModel::ParameterUnits, "
              "runtime/model/parameter_units.h) name none of them (ParameterUnit::frozen_count)"));
        }
        frozen.worker = zero_->worker();
        auto partition = ZeroPartition::Create(frozen, frozen_params_, data_parallel_,
                                               deferred != nullptr ? &frozen_values : nullptr);
        if (!partition.ok()) return partition.status();
        frozen_zero_ = std::move(*partition);
      }
      // With NVMe offload the moments live in the swap files, not here.
      shard_adam_ = std::make_unique<ShardAdam>(
          config_.optimizer, zero_->swapped() ? torch::empty({0}) : zero_->master_shard(), options.offload_optimizer);
      experts_split_ = experts_apart && has_experts;
      if (experts_apart && !has_experts) {
        return absl::InvalidArgumentError(absl::StrCat("this rank's groups are ", parallel_->Describe(),
                                                       ": expert parallelism, but the model has no experts"));
      }
      // Experts that all stay frozen (LoRA on attention only) have nothing to
      // step: no partition of their own, and the dense step runs as without
      // experts. ApplyLora sees that every rank agrees (all adapt experts or
      // none does).
      if (experts_apart && !expert_params_.empty()) {
        // Note [Mixture of experts]: cut over the replicas of the same
        // experts, averaged over every data-parallel rank.
        ZeroOptions expert_options = options;
        expert_options.norm_counts.clear();
        expert_options.gradient_divisor = data_parallel_ != nullptr ? data_parallel_->size() : 1;
        // Note [NVMe offload]: the experts' swap files in a folder of their own.
        if (expert_options.nvme) expert_options.nvme->name += "-experts";
        if (expert_options.nvme_param) expert_options.nvme_param->name += "-experts";
        auto experts = ZeroPartition::Create(expert_options, expert_params_, parallel_->expert_data());
        if (!experts.ok()) return experts.status();
        expert_zero_ = std::move(*experts);
        expert_adam_ = std::make_unique<ShardAdam>(
            config_.optimizer, expert_zero_->swapped() ? torch::empty({0}) : expert_zero_->master_shard(),
            expert_options.offload_optimizer);
      }
      if (options.overlap_units) {
        stage3_ = Stage3Runner::GradientsOnly(units, zero_.get());
        partitioned->SetUnitRunner(stage3_.get());
      }
      if (stage == 3) {
        // At most: the largest layers of the two sides may be different units.
        const int64_t needed = zero_->StepLiveElements() + (frozen_zero_ ? frozen_zero_->StepLiveElements() : 0);
        if (needed > config_.zero_optimization.stage3_max_live_parameters) {
          return absl::InvalidArgumentError(absl::StrCat(
              "zero_optimization.stage3_max_live_parameters=", config_.zero_optimization.stage3_max_live_parameters,
              " is below what a step of this model needs whole at once: ", needed,
              " elements (the root and persistent units and the largest layer unit, frozen parameters included)"));
        }
        stage3_ = std::make_unique<Stage3Runner>(units, zero_.get(), frozen_zero_.get(),
                                                 config_.zero_optimization.stage3_prefetch_bucket_size,
                                                 config_.zero_optimization.stage3_max_live_parameters);
        partitioned->SetUnitRunner(stage3_.get());
      }
    } else if (decoupled) {
      optimizer_ = std::make_unique<torch::optim::AdamW>(
          master_params_,
          torch::optim::AdamWOptions(o.lr).betas({o.betas[0], o.betas[1]}).eps(o.eps).weight_decay(o.weight_decay));
    } else {
      optimizer_ = std::make_unique<torch::optim::Adam>(
          master_params_,
          torch::optim::AdamOptions(o.lr).betas({o.betas[0], o.betas[1]}).eps(o.eps).weight_decay(o.weight_decay));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("engine initialisation: ", e.what_without_backtrace()));
  }
  auto schedule = MakeLrSchedule(config_.scheduler, config_.optimizer.lr);
  if (!schedule.ok()) return schedule.status();
  schedule_ = std::move(*schedule);
  if (config_.fp16.enabled) {
    auto scaler = LossScaler::Create(config_.fp16);
    if (!scaler.ok()) return scaler.status();
    scaler_ = std::make_unique<LossScaler>(std::move(*scaler));
  }
  ApplyLrAndMomentum(schedule_->LrAt(0));
  return absl::OkStatus();
}

Engine::~Engine() {
  // Note [Delayed parameter update]: the host step still reads the shard.
  if (host_step_.valid()) host_step_.wait();
  if (stage3_) {
    if (auto* partitioned = dynamic_cast<PartitionedModel*>(model_.get())) partitioned->SetUnitRunner(nullptr);
  }
}

absl::Status Engine::GatherFullParameters(bool frozen_too) {
  if (absl::Status applied = ApplyPendingUpdate(); !applied.ok()) return applied;
  if (!stage3_) return absl::OkStatus();
  try {
    return stage3_->GatherAll(frozen_too);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("gather parameters: ", e.what_without_backtrace()));
  }
}

bool Engine::IsGradientAccumulationBoundary() const {
  return (micro_steps_ + 1) % config_.gradient_accumulation_steps == 0;
}

double Engine::CurrentLr() const { return schedule_->LrAt(successful_steps_); }

absl::Status Engine::Backward(const torch::Tensor& loss) {
  try {
    const double factor = loss_gradient_factor();
    // Note [Non-finite guard]: counted on the device, read with the norm.
    torch::Tensor bad = torch::logical_not(torch::isfinite(loss.detach())).to(torch::kFloat).sum();
    nonfinite_losses_ = nonfinite_losses_.defined() ? nonfinite_losses_ + bad : bad;
    // Note [Gradients to the host during backward].
    if (zero_ && !stage_) zero_->BeginBackward(IsGradientAccumulationBoundary());
    (loss.to(torch::kFloat) * factor).backward();
    if (stage3_) {
      absl::Status swept = stage3_->FinishBackward();
      if (!swept.ok()) return swept;
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("backward: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status Engine::BackwardFrom(const torch::Tensor& output, const torch::Tensor& gradient) {
  try {
    torch::autograd::backward({output}, {gradient});
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("backward: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status Engine::AllReduceGradients() {
  if (data_parallel_ == nullptr || data_parallel_->size() == 1) return absl::OkStatus();
  const double dp = static_cast<double>(data_parallel_->size());
  const double predivide = config_.prescale_gradients ? config_.gradient_predivide_factor : 1.0;
  const int64_t bucket_limit = std::max<int64_t>(1, config_.zero_optimization.reduce_bucket_size);
  size_t begin = 0;
  while (begin < model_params_.size()) {
    // One bucket: consecutive gradients up to reduce_bucket_size elements.
    size_t end = begin;
    int64_t elements = 0;
    while (end < model_params_.size() && (end == begin || elements + model_params_[end].numel() <= bucket_limit)) {
      elements += model_params_[end].numel();
      ++end;
    }
    std::vector<torch::Tensor> grads;
    for (size_t i = begin; i < end; ++i) {
      torch::Tensor& p = model_params_[i];
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      grads.push_back(p.grad().reshape({-1}));
    }
    torch::Tensor flat = torch::cat(grads);
    if (predivide != 1.0) flat.div_(predivide);
    absl::Status reduced = data_parallel_->AllReduce(flat, ReduceOp::kSum);
    if (!reduced.ok()) return reduced;
    flat.mul_(predivide / dp);
    int64_t offset = 0;
    for (size_t i = begin; i < end; ++i) {
      torch::Tensor& grad = model_params_[i].mutable_grad();
      grad.copy_(flat.narrow(0, offset, grad.numel()).view_as(grad));
      offset += grad.numel();
    }
    begin = end;
  }
  return absl::OkStatus();
}

absl::Status Engine::DecideNormCounts() {
  auto* family = dynamic_cast<ModelInterface*>(model_.get());
  if (family == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model parallelism (", parallel_->Describe(),
        ") needs a model family that declares its layers and tensor-parallel forms (runtime/model/model_interface.h)"));
  }
  std::set<std::string> split;
  for (const TensorParallelForm& form : family->TensorParallelForms()) split.insert(form.parameter);
  const bool first = parallel_->tensor() == nullptr || parallel_->tensor()->rank() == 0;
  for (const auto& item : model_->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    const bool copy = stage_ && stage_->tied_copies.count(item.key()) > 0;
    norm_counts_.push_back((first || split.count(item.key()) > 0) && !copy);
  }
  return absl::OkStatus();
}

absl::Status Engine::SumOverModelParallelGroup(torch::Tensor& norm_squared) {
  if (parallel_->model_parallel() == nullptr) return absl::OkStatus();
  return parallel_->model_parallel()->AllReduce(norm_squared, ReduceOp::kSum);
}

absl::StatusOr<double> Engine::GradNormSquared() {
  double total = 0;
  for (size_t i = 0; i < master_params_.size(); ++i) {
    const torch::Tensor& p = master_params_[i];
    if (!p.grad().defined() || (!norm_counts_.empty() && !norm_counts_[i])) continue;
    total += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
  }
  if (parallel_->model_parallel() == nullptr) return total;
  torch::Tensor sum = torch::full({1}, total, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  if (absl::Status s = SumOverModelParallelGroup(sum); !s.ok()) return s;
  return sum.item<double>();
}

void Engine::ApplyLrAndMomentum(double lr) {
  const int64_t step = successful_steps_;
  std::optional<double> beta1 = schedule_ ? schedule_->Beta1At(step) : std::nullopt;
  std::optional<double> beta2 = schedule_ ? schedule_->Beta2At(step) : std::nullopt;
  if (!optimizer_) return;  // ZeRO: the shard optimizer takes lr and betas per step
  for (auto& group : optimizer_->param_groups()) {
    if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&group.options())) {
      SetLrAndBetas(*adamw, lr, beta1, beta2);
    } else if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&group.options())) {
      SetLrAndBetas(*adam, lr, beta1, beta2);
    }
  }
}

// Note [Non-finite guard]
// A non-finite loss (any micro-batch of the window, on any rank) or gradient
// norm means the gradient cannot be used. With fp16 the loss scaler treats it
// as an overflow (DeepSpeed's semantics: halve the scale, skip). With
// fp32/bf16, where DeepSpeed steps anyway and writes NaN into the
// parameters, the step is skipped: parameters, optimizer state and the LR
// schedule stay as they were, skipped_steps and nonfinite_steps count it, and
// StepResult::nonfinite says so; the caller decides when to give up (dsrank:
// train.max_nonfinite_steps in a row). The losses are counted on the device
// in Backward and folded into the norm as NaN before the norm's all-reduce
// (or all-reduced themselves where the norm is not), so every rank decides
// the same. On GPU paths that clip on the device the kernel itself skips a
// non-finite norm (fused_adamw.cu). A checkpoint is never written from
// non-finite state (CheckFinite in EngineCheckpointer::Save).
absl::StatusOr<torch::Tensor> Engine::TakeNonFiniteLosses(bool over_group) {
  torch::Tensor count = nonfinite_losses_.defined()
                            ? nonfinite_losses_.reshape({1}).clone()
                            : torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
  nonfinite_losses_ = torch::Tensor();
  if (over_group && data_parallel_ != nullptr && data_parallel_->size() > 1) {
    absl::Status reduced = data_parallel_->AllReduce(count, ReduceOp::kSum);
    if (!reduced.ok()) return reduced;
  }
  return count;
}

void Engine::PoisonNorm(torch::Tensor& norm_squared, const torch::Tensor& nonfinite_losses) {
  norm_squared.masked_fill_(nonfinite_losses.to(norm_squared.device()).gt(0).reshape({}),
                            std::numeric_limits<double>::quiet_NaN());
}

void Engine::CountDeviceDecidedStep(double norm_squared, StepResult* result) {
  if (std::isfinite(norm_squared)) {
    result->stepped = true;
    ++successful_steps_;
    return;
  }
  // The kernel skipped the update; the step it counted is taken back
  // (UnscaleAndClip counted the non-finite step).
  shard_adam_->set_step(shard_adam_->step() - 1);
  result->stepped = false;
  result->lr = 0;
  ++skipped_steps_;
}

absl::StatusOr<int> Engine::CountFailedRanks(bool failed) {
  // Every rank of the job: with tensor parallelism several data-parallel
  // groups write one checkpoint.
  Communicator* everyone = parallel_->world();
  if (everyone == nullptr || everyone->size() == 1) return failed ? 1 : 0;
  try {
    torch::Tensor flag =
        torch::full({1}, failed ? 1.0 : 0.0, torch::TensorOptions().dtype(torch::kFloat).device(device_));
    absl::Status reduced = everyone->AllReduce(flag, ReduceOp::kSum);
    if (!reduced.ok()) return reduced;
    return static_cast<int>(flag.item<float>() + 0.5f);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("agreeing on a failure: ", e.what_without_backtrace()));
  }
}

absl::Status Engine::CheckFinite(const std::string& what) const {
  try {
    torch::NoGradGuard no_grad;
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    if (zero_) {
      tensors.emplace_back("the fp32 master shard", zero_->master_shard());
      tensors.emplace_back("the optimizer's exp_avg shard", shard_adam_->exp_avg());
      tensors.emplace_back("the optimizer's exp_avg_sq shard", shard_adam_->exp_avg_sq());
      if (expert_zero_) {
        tensors.emplace_back("the experts' fp32 master shard", expert_zero_->master_shard());
        tensors.emplace_back("the experts' exp_avg shard", expert_adam_->exp_avg());
        tensors.emplace_back("the experts' exp_avg_sq shard", expert_adam_->exp_avg_sq());
      }
    } else {
      for (const auto& item : model_->named_parameters()) {
        if (item.value().requires_grad()) tensors.emplace_back(absl::StrCat("parameter ", item.key()), item.value());
      }
      if (compute_dtype_ != torch::kFloat) {
        for (size_t i = 0; i < master_params_.size(); ++i) {
          tensors.emplace_back(absl::StrCat("fp32 master copy #", i), master_params_[i]);
        }
      }
    }
    // One host wait for all of them; a second pass only to name the culprit.
    torch::Tensor bad;
    for (const auto& [name, tensor] : tensors) {
      if (!tensor.defined() || tensor.numel() == 0) continue;
      torch::Tensor count = torch::logical_not(torch::isfinite(tensor)).sum();
      bad = bad.defined() ? bad + count : count;
    }
    if (!bad.defined() || bad.item<int64_t>() == 0) return absl::OkStatus();
    for (const auto& [name, tensor] : tensors) {
      if (!tensor.defined() || tensor.numel() == 0) continue;
      const int64_t count = torch::logical_not(torch::isfinite(tensor)).sum().item<int64_t>();
      if (count > 0) {
        return absl::FailedPreconditionError(absl::StrCat(what, ": refused: ", name, " holds ", count, " of ",
                                                          tensor.numel(), " values that are not finite"));
      }
    }
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": checking values: ", e.what_without_backtrace()));
  }
}

std::optional<double> Engine::UnscaleAndClip(double norm_squared, StepResult* result) {
  const bool overflow = !std::isfinite(norm_squared);
  const double scale = loss_scale();
  // Note [Non-finite guard]: fp16 asks its loss scaler; fp32/bf16 skip.
  const bool skip = scaler_ ? scaler_->Update(overflow) : overflow;
  if (overflow && !scaler_) {
    result->nonfinite = true;
    ++nonfinite_steps_;
  }
  const double unscale = 1.0 / scale;
  result->grad_norm = std::sqrt(norm_squared) * unscale;
  if (skip) return std::nullopt;
  const double coefficient = kernels::ClipCoefficient(result->grad_norm, unscale, config_.gradient_clipping);
  result->clipped_norm = std::sqrt(norm_squared) * coefficient;
  return coefficient;
}

absl::StatusOr<StepResult> Engine::Step() {
  StepResult result;
  result.loss_scale = loss_scale();
  if (!IsGradientAccumulationBoundary()) {
    // A pipeline's gradients stay where autograd put them until the
    // boundary, whatever the stage: its micro-batches interleave.
    if (zero_ && !stage_) {
      absl::Status accumulated = zero_->AccumulateMicroStep();
      if (!accumulated.ok()) return accumulated;
    }
    if (expert_zero_) {
      absl::Status accumulated = expert_zero_->AccumulateMicroStep();
      if (!accumulated.ok()) return accumulated;
    }
    ++micro_steps_;
    return result;
  }
  result.boundary = true;
  if (expert_zero_) return ExpertParallelStep(result);
  if (zero_) return ZeroStep(result);
  return AllReduceStep(std::move(result));
}

absl::StatusOr<StepResult> Engine::AllReduceStep(StepResult begun) {
  return BoundaryStep("optimizer step", std::move(begun), [&](StepResult& result) -> absl::Status {
    absl::Status reduced = AllReduceGradients();
    if (!reduced.ok()) return reduced;
    if (compute_dtype_ != torch::kFloat) {
      for (size_t i = 0; i < model_params_.size(); ++i) {
        const torch::Tensor& grad = model_params_[i].grad();
        if (!grad.defined()) continue;
        master_params_[i].mutable_grad() = grad.to(torch::kFloat);
      }
    }
    // Every rank holds the same reduced gradient; only the losses differ.
    DS_ASSIGN_OR_RETURN(torch::Tensor bad_losses, TakeNonFiniteLosses(/*over_group=*/true));
    DS_ASSIGN_OR_RETURN(double norm_squared, GradNormSquared());
    if (bad_losses.item<float>() > 0) norm_squared = std::numeric_limits<double>::quiet_NaN();
    const std::optional<double> factor = UnscaleAndClip(norm_squared, &result);
    if (!factor) {
      ++skipped_steps_;
    } else {
      const double coefficient = *factor;
      if (coefficient != 1.0) {
        for (auto& p : master_params_) {
          if (p.grad().defined()) p.mutable_grad().mul_(coefficient);
        }
      }
      result.lr = schedule_->LrAt(successful_steps_);
      ApplyLrAndMomentum(result.lr);
      optimizer_->step();
      if (compute_dtype_ != torch::kFloat) {
        for (size_t i = 0; i < model_params_.size(); ++i) model_params_[i].copy_(master_params_[i]);
      }
      result.stepped = true;
      ++successful_steps_;
    }
    for (auto& p : model_params_) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
    if (compute_dtype_ != torch::kFloat) {
      for (auto& p : master_params_) p.mutable_grad() = torch::Tensor();
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<StepResult> Engine::BoundaryStep(const char* what, StepResult result,
                                                 const std::function<absl::Status(StepResult&)>& body) {
  try {
    torch::NoGradGuard no_grad;
    if (absl::Status done = body(result); !done.ok()) return done;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  }
  ++global_steps_;
  ++micro_steps_;
  return result;
}

Engine::MemoryBreakdown Engine::Memory() const {
  MemoryBreakdown bytes;
  if (frozen_zero_) {
    bytes.frozen_parameters = frozen_zero_->ParameterBytes();
  } else {
    for (const auto& p : model_->parameters()) {
      if (!p.requires_grad()) bytes.frozen_parameters += p.numel() * p.element_size();
    }
  }
  if (zero_) {
    bytes.parameters = zero_->ParameterBytes();
    bytes.parameters_on_host = zero_->offload_param();
    bytes.gathered_peak_elements =
        zero_->PeakLiveElements() + (frozen_zero_ ? frozen_zero_->PeakLiveElements() : 0);
    bytes.partition_units = zero_->units();
    bytes.gradients = zero_->GradientBytes();
    bytes.master_weights = zero_->MasterBytes();
    bytes.optimizer_state = shard_adam_->StateBytes();
    bytes.optimizer_on_host = zero_->offload();
    if (const SwappedShard* swapped = zero_->swapped()) {
      bytes.swapped_to_nvme = swapped->FileBytes();
      bytes.swap_buffers = swapped->HostBufferBytes();
      if (zero_->stage() != 3) bytes.host_parameter_copy = zero_->shard_size() * zero_->ParameterElementBytes();
    } else {
      bytes.host_parameter_copy = zero_->HostParameterCopyBytes();
    }
    for (const ZeroPartition* partition : {zero_.get(), frozen_zero_.get(), expert_zero_.get()}) {
      if (partition == nullptr || partition->parameter_files() == nullptr) continue;
      bytes.parameters_on_nvme += partition->parameter_files()->file_bytes();
      bytes.parameter_staging += partition->parameter_files()->staging_bytes();
      bytes.parameters_in_host_memory += partition->parameter_files()->resident_bytes();
    }
    if (expert_zero_) {
      bytes.parameters += expert_zero_->ParameterBytes();
      bytes.gradients += expert_zero_->GradientBytes();
      bytes.master_weights += expert_zero_->MasterBytes();
      bytes.optimizer_state += expert_adam_->StateBytes();
      bytes.expert_master_weights = expert_zero_->MasterBytes();
      bytes.expert_optimizer_state = expert_adam_->StateBytes();
    }
    return bytes;
  }
  for (const auto& p : model_params_) {
    bytes.parameters += p.numel() * p.element_size();
    if (p.grad().defined()) bytes.gradients += p.grad().numel() * p.grad().element_size();
  }
  if (compute_dtype_ != torch::kFloat) {
    for (const auto& p : master_params_) bytes.master_weights += p.numel() * p.element_size();
  }
  for (const auto& [key, state] : optimizer_->state()) {
    if (auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state.get())) {
      bytes.optimizer_state += adamw->exp_avg().numel() * adamw->exp_avg().element_size() * 2;
    } else if (auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state.get())) {
      bytes.optimizer_state += adam->exp_avg().numel() * adam->exp_avg().element_size() * 2;
    }
  }
  return bytes;
}

std::pair<double, double> Engine::ScheduledBetas() const {
  return {schedule_->Beta1At(successful_steps_).value_or(config_.optimizer.betas[0]),
          schedule_->Beta2At(successful_steps_).value_or(config_.optimizer.betas[1])};
}

}  // namespace dslaunch::runtime

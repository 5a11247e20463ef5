#include "runtime/pipeline/pipeline_engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/zero/tensor_storage.h"
#include "common/status_macros.h"
#include "runtime/config/pipeline_chunks.h"
#include "runtime/moe/auxiliary_loss.h"
#include "runtime/pipeline/pipeline_partition.h"

namespace dslaunch::runtime {
namespace {

// A transfer's header: rank, the sizes (up to kMaxDims), the dtype.
constexpr int kMaxDims = 6;
constexpr int kHeaderLength = kMaxDims + 2;

torch::Tensor EncodeHeader(const torch::Tensor& tensor) {
  torch::Tensor header = torch::zeros({kHeaderLength}, torch::kLong);
  auto h = header.accessor<int64_t, 1>();
  h[0] = tensor.dim();
  for (int64_t d = 0; d < std::min<int64_t>(tensor.dim(), kMaxDims); ++d) h[1 + d] = tensor.size(d);
  h[kHeaderLength - 1] = static_cast<int64_t>(tensor.scalar_type());
  return header.to(tensor.device());
}

// MisstateShapeForTesting: one more step along dimension 1 (the sequence).
std::vector<int64_t> MisstatedShape(const torch::Tensor& tensor) {
  std::vector<int64_t> sizes = tensor.sizes().vec();
  sizes[std::min<size_t>(1, sizes.size() - 1)] += 1;
  return sizes;
}

std::string DescribeHeader(const torch::Tensor& header) {
  torch::Tensor h = header.to(torch::kCPU);
  const int64_t dims = std::clamp<int64_t>(h[0].item<int64_t>(), 0, kMaxDims);
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < dims; ++d) sizes.push_back(h[1 + d].item<int64_t>());
  const auto type = static_cast<c10::ScalarType>(h[kHeaderLength - 1].item<int64_t>());
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "] ", c10::toString(type));
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

std::atomic<bool> tied_sum_broken{false};

TokenBatch ToDevice(const TokenBatch& batch, torch::Device device) {
  auto move = [&](const torch::Tensor& t) { return t.defined() ? t.to(device) : t; };
  return TokenBatch{move(batch.tokens), move(batch.targets), move(batch.positions), move(batch.segments)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<PipelineEngine>> PipelineEngine::Create(std::shared_ptr<torch::nn::Module> model,
                                                                        const DsConfig& config,
                                                                        std::shared_ptr<const ParallelState> parallel,
                                                                        torch::Device device) {
  if (parallel == nullptr) return absl::InvalidArgumentError("PipelineEngine::Create: no ParallelState");
  auto* family = dynamic_cast<ModelInterface*>(model.get());
  if (family == nullptr) {
    return absl::InvalidArgumentError(
        "pipeline parallelism needs a model family that lists its layers (runtime/model/model_interface.h)");
  }
  std::unique_ptr<PipelineEngine> pipe(new PipelineEngine());
  pipe->model_ = model;
  pipe->family_ = family;
  pipe->parallel_ = parallel;
  pipe->device_ = device;
  pipe->pipeline_ = parallel->pipeline();
  pipe->shape_.stages = parallel->topology().pipe_size();
  pipe->stage_ = parallel->coordinate().pipe;
  pipe->shape_.micro_batches = config.gradient_accumulation_steps;
  // Note [Pipeline stages]: num_layers_per_virtual_stage says how many
  // chunks from the model's depth (its layer list: the embedding, the
  // blocks, the head).
  PipelineConfig pipeline = config.pipeline;
  if (pipeline.num_layers_per_virtual_stage > 0) {
    const int64_t blocks = static_cast<int64_t>(family->Layers().size()) - 2;
    DS_ASSIGN_OR_RETURN(VirtualStageCut cut,
                        VirtualStagesOfBlocks(blocks, pipe->shape_.stages, pipeline.num_layers_per_virtual_stage));
    if (pipeline.virtual_stages > 1 && pipeline.virtual_stages != cut.virtual_stages) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.virtual_stages=", pipeline.virtual_stages, " but pipeline.num_layers_per_virtual_stage=",
          pipeline.num_layers_per_virtual_stage, " gives ", cut.virtual_stages, " model chunks per stage (", blocks,
          " blocks over ", pipe->shape_.stages, " stages)"));
    }
    if (!pipeline.layers_per_stage.empty()) {
      return absl::InvalidArgumentError(
          "pipeline.layers_per_stage and pipeline.num_layers_per_virtual_stage both say how the layers are cut: set "
          "one of them");
    }
    pipeline.virtual_stages = cut.virtual_stages;
    pipeline.layers_per_stage = cut.layers_per_part;
  }
  pipe->shape_.virtual_stages = pipeline.virtual_stages;
  if (pipe->shape_.stages != config.pipeline.stages) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline.stages=", config.pipeline.stages,
                                                   " but the job's process grid has ", pipe->shape_.stages,
                                                   " pipeline stages (", parallel->Describe(), ")"));
  }
  if (pipe->pipeline_ != nullptr && pipe->pipeline_->rank() != pipe->stage_) {
    return absl::InternalError(absl::StrCat("pipeline group rank ", pipe->pipeline_->rank(), " is not stage ",
                                            pipe->stage_, " (", parallel->Describe(), ")"));
  }
  DS_ASSIGN_OR_RETURN(pipe->kind_, ParsePipelineSchedule(config.pipeline.schedule));
  if (absl::Status s = ValidatePipelineShape(pipe->kind_, pipe->shape_); !s.ok()) return s;
  DS_ASSIGN_OR_RETURN(pipe->stream_, BuildStageSchedule(pipe->kind_, pipe->shape_, pipe->stage_));
  if (absl::Status s = pipe->Cut(*family, *model, pipeline); !s.ok()) return s;
  pipe->interval_ = config.pipeline.activation_checkpoint_interval;
  pipe->synchronized_timing_ = config.wall_clock_breakdown && device.is_cuda();
  pipe->head_layer_ = static_cast<int>(family->Layers().size()) - 1;
  PipelineStageRole role;
  for (const TiedSet& tie : pipe->tied_) {
    if (tie.stages.front() != pipe->stage_) role.tied_copies.insert(tie.name);
  }
  // Before the engine casts the parameters: the copies equal the owner's.
  if (absl::Status s = pipe->ShareTiedParameters(); !s.ok()) return s;
  DS_ASSIGN_OR_RETURN(pipe->engine_, Engine::Create(model, config, parallel, device, std::move(role)));
  // The engine may have replaced the parameters (cast, moved): look them up again.
  for (TiedSet& tie : pipe->tied_) {
    for (const auto& item : model->named_parameters()) {
      if (item.key() == tie.name) tie.parameter = item.value();
    }
  }
  return pipe;
}

absl::Status PipelineEngine::Cut(ModelInterface& family, torch::nn::Module& module, const PipelineConfig& pipeline) {
  const std::vector<ModelLayer> layers = family.Layers();
  std::map<std::string, torch::Tensor> parameters;
  for (const auto& item : module.named_parameters()) parameters[item.key()] = item.value();
  std::vector<PipelineLayerInfo> infos;
  std::map<std::string, int> layer_index;
  for (const ModelLayer& layer : layers) {
    // Every parameter, frozen ones too: a layer's compute follows its
    // weights, and with LoRA almost all of them are the frozen base.
    int64_t count = 0;
    for (const std::string& name : layer.parameters) {
      auto it = parameters.find(name);
      if (it != parameters.end()) count += it->second.numel();
    }
    layer_index[layer.name] = static_cast<int>(infos.size());
    infos.push_back(PipelineLayerInfo{layer.name, layer.type, count});
  }
  const int parts = shape_.virtual_count();
  if (!pipeline.layers_per_stage.empty()) {
    if (static_cast<int>(pipeline.layers_per_stage.size()) != parts) {
      return absl::InvalidArgumentError(absl::StrCat("pipeline.layers_per_stage has ",
                                                     pipeline.layers_per_stage.size(), " entries; the pipeline has ",
                                                     parts, " (virtual) stages"));
    }
    DS_ASSIGN_OR_RETURN(boundaries_, PartitionByCounts(pipeline.layers_per_stage, static_cast<int>(infos.size())));
  } else {
    DS_ASSIGN_OR_RETURN(boundaries_, PartitionLayers(infos, pipeline.partition_method, parts));
  }
  partition_lines_ = DescribePartition(infos, boundaries_);
  // The stage of each layer.
  std::vector<int> stage_of(infos.size());
  for (int v = 0; v < parts; ++v) {
    for (int i = boundaries_[v]; i < boundaries_[v + 1]; ++i) stage_of[i] = v % shape_.stages;
  }
  // A stage with nothing to train has no optimizer partition (LoRA cut so
  // that a stage holds only the frozen embedding or head): refused, naming it.
  std::vector<int64_t> trainable_on(shape_.stages, 0);
  for (const ModelLayer& layer : layers) {
    for (const std::string& name : layer.parameters) {
      auto it = parameters.find(name);
      if (it != parameters.end() && it->second.requires_grad()) {
        trainable_on[stage_of[layer_index[layer.name]]] += it->second.numel();
      }
    }
  }
  for (int stage = 0; stage < shape_.stages; ++stage) {
    if (trainable_on[stage] > 0) continue;
    std::vector<std::string> what;
    for (int v = stage; v < parts; v += shape_.stages) what.push_back(partition_lines_[v]);
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline stage ", stage, " would hold no trainable parameter (", absl::StrJoin(what, "; "),
        ": frozen, e.g. under LoRA); cut the model so that every stage holds a trained layer "
        "(pipeline.layers_per_stage, fewer pipeline.stages or another pipeline.partition_method)"));
  }
  for (const ModelLayer& layer : layers) {
    if (stage_of[layer_index[layer.name]] != stage_) continue;
    for (const std::string& name : layer.parameters) held_.insert(name);
  }
  for (const TiedParameter& tied : family.TiedParameters()) {
    std::set<int> stages;
    for (const std::string& layer : tied.layers) {
      auto it = layer_index.find(layer);
      if (it == layer_index.end()) {
        return absl::InternalError(absl::StrCat("tied parameter ", tied.parameter, " names no layer ", layer));
      }
      stages.insert(stage_of[it->second]);
    }
    if (!stages.count(stage_)) continue;
    held_.insert(tied.parameter);
    if (stages.size() > 1) tied_.push_back(TiedSet{tied.parameter, parameters.at(tied.parameter), {stages.begin(), stages.end()}});
  }
  // Everything else leaves this rank: frozen, and its storage freed.
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : parameters) {
    if (held_.count(name)) continue;
    tensor.requires_grad_(false);
    tensor.set_(torch::empty({0}, tensor.options()));
  }
  return absl::OkStatus();
}

absl::Status PipelineEngine::ShareTiedParameters() {
  torch::NoGradGuard no_grad;
  for (TiedSet& tie : tied_) {
    std::vector<PeerTransfer> transfers;
    // On the device the communicator works on (NCCL: CUDA tensors).
    torch::Tensor value = tie.parameter.detach().to(device_).contiguous();
    if (tie.stages.front() == stage_) {
      for (size_t i = 1; i < tie.stages.size(); ++i) transfers.push_back({PeerTransfer::Kind::kSend, value, tie.stages[i]});
    } else {
      transfers.push_back({PeerTransfer::Kind::kRecv, value, tie.stages.front()});
    }
    if (absl::Status s = pipeline_->SendRecv(transfers); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("sharing tied parameter ", tie.name, " across stages: ", s.message()));
    }
    if (!value.is_same(tie.parameter)) tie.parameter.copy_(value);
  }
  return absl::OkStatus();
}

void BreakTiedGradientSumForTesting(bool broken) { tied_sum_broken = broken; }

absl::Status PipelineEngine::ReduceTiedGradients() {
  if (tied_sum_broken) return absl::OkStatus();
  torch::NoGradGuard no_grad;
  for (TiedSet& tie : tied_) {
    torch::Tensor& p = tie.parameter;
    if (!p.requires_grad()) continue;  // frozen (LoRA's base) on every stage alike
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    // Every holder sends its gradient to every other; each adds them in
    // stage order, so all copies get the same sum.
    std::vector<PeerTransfer> transfers;
    std::map<int, torch::Tensor> gradients;
    const torch::Tensor mine = p.grad().contiguous();
    for (int other : tie.stages) {
      if (other == stage_) {
        gradients[other] = mine;
        continue;
      }
      transfers.push_back({PeerTransfer::Kind::kSend, mine, other});
      gradients[other] = torch::empty_like(mine);
      transfers.push_back({PeerTransfer::Kind::kRecv, gradients[other], other});
    }
    if (absl::Status s = pipeline_->SendRecv(transfers); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("summing the gradient of tied parameter ", tie.name,
                                                 " across stages: ", s.message()));
    }
    torch::Tensor sum = gradients.begin()->second.clone();
    for (auto it = std::next(gradients.begin()); it != gradients.end(); ++it) sum.add_(it->second);
    p.mutable_grad().copy_(sum);
  }
  return absl::OkStatus();
}

std::string PipelineEngine::Where(const PipeInstruction& instruction) const {
  return absl::StrCat("pipeline stage ", stage_, ", ", DescribeInstruction(instruction));
}

absl::Status PipelineEngine::Exchange(const PipeInstruction& instruction, const std::vector<TokenBatch>& batches,
                                      std::map<std::pair<int, int>, PassState>& passes) {
  const int S = shape_.stages;
  std::vector<PeerTransfer> transfers;
  // Received headers, each checked against the buffer of the tensor after it.
  std::vector<std::pair<torch::Tensor, size_t>> headers;
  std::vector<std::pair<int, int>> sent_gradients;  // passes whose input gradient goes out
  std::vector<std::pair<int, int>> sent_outputs;    // passes whose output goes out
  for (const PipeTransfer& t : instruction.transfers) {
    const bool activation = t.tensor == PipeTensor::kActivation;
    // The pass on this rank that produced (send) or consumes (receive) it.
    const int virtual_stage = t.send ? (activation ? t.virtual_stage - 1 : t.virtual_stage + 1) : t.virtual_stage;
    PassState& pass = passes[{t.micro_batch, virtual_stage / S}];
    torch::Tensor tensor;
    if (t.send && activation) {
      tensor = pass.output.detach().contiguous();
      if (!t.header) sent_outputs.push_back({t.micro_batch, virtual_stage / S});
    } else if (t.send) {
      tensor = pass.input.grad().defined() ? pass.input.grad().contiguous() : torch::zeros_like(pass.input);
      if (!t.header) sent_gradients.push_back({t.micro_batch, virtual_stage / S});
    } else if (activation) {
      if (!pass.input.defined()) {
        pass.input = torch::empty(family_->ActivationShape(batches[t.micro_batch]),
                                  torch::TensorOptions().dtype(engine_->compute_dtype()).device(device_));
      }
      tensor = pass.input;
    } else {
      if (!pass.gradient.defined()) pass.gradient = torch::empty_like(pass.output);
      tensor = pass.gradient;
    }
    if (t.header) {
      torch::Tensor header = t.send ? EncodeHeader(tensor) : torch::empty({kHeaderLength}, torch::TensorOptions().dtype(torch::kLong).device(device_));
      if (t.send && activation && t.micro_batch == misstate_shape_) {
        misstate_shape_ = -1;
        header = EncodeHeader(torch::empty(MisstatedShape(tensor), tensor.options()));
      }
      if (!t.send) headers.push_back({header, transfers.size() + 1});
      transfers.push_back({t.send ? PeerTransfer::Kind::kSend : PeerTransfer::Kind::kRecv, header, t.peer});
      continue;
    }
    transfers.push_back({t.send ? PeerTransfer::Kind::kSend : PeerTransfer::Kind::kRecv, tensor, t.peer});
  }
  absl::Status moved = pipeline_->SendRecv(transfers);
  for (const auto& [header, payload] : headers) {
    // A received header that disagrees explains a failed or garbled transfer.
    const torch::Tensor expected = EncodeHeader(transfers[payload].tensor);
    if (!moved.ok() && header.to(torch::kCPU).eq(0).all().item<bool>()) continue;  // never arrived
    if (!torch::equal(header.to(torch::kCPU), expected.to(torch::kCPU))) {
      const PipeTransfer& t = instruction.transfers[payload];
      return absl::FailedPreconditionError(absl::StrCat(
          Where(instruction), ": stage ", t.peer, " sends the ",
          t.tensor == PipeTensor::kActivation ? "activation" : "gradient", " of micro-batch ", t.micro_batch, " as ",
          DescribeHeader(header), " but this stage expects ", DescribeHeader(expected),
          ": the stages disagree on the model or the batch shape"));
    }
  }
  if (!moved.ok()) return absl::Status(moved.code(), absl::StrCat(Where(instruction), ": ", moved.message()));
  for (const auto& key : sent_gradients) passes[key].input = torch::Tensor();
  // Note [Outputs released once sent]: the next stage has the values; the
  // output's backward needs only its shape (the gradient that comes back)
  // and its autograd node, which (a residual add, an embedding) saves no
  // output. Megatron's deallocate_output_tensor; the memory goes now
  // instead of after the pass's backward, M·S passes later at worst. The
  // transfer ran on this thread's stream, so the memory is reused after it.
  for (const auto& key : sent_outputs) {
    const torch::Tensor& output = passes[key].output;
    // A view shares memory with what it views (which a node may have saved):
    // kept (no model family's stage ends in one; the bytes counted show it).
    if (output.is_view()) continue;
    released_output_bytes_ += static_cast<int64_t>(output.storage().nbytes());
    ResizeStorage(output, 0);
  }
  return absl::OkStatus();
}

absl::StatusOr<PipelineBatchResult> PipelineEngine::TrainBatch(const std::vector<TokenBatch>& micro_batches) {
  if (static_cast<int>(micro_batches.size()) != shape_.micro_batches) {
    return absl::InvalidArgumentError(absl::StrCat("TrainBatch takes gradient_accumulation_steps (",
                                                   shape_.micro_batches, ") micro-batches, got ",
                                                   micro_batches.size()));
  }
  std::vector<TokenBatch> batches;
  for (const TokenBatch& batch : micro_batches) batches.push_back(ToDevice(batch, device_));
  const int S = shape_.stages;
  const int last_virtual = shape_.virtual_count() - 1;
  PipelineBatchResult result;
  std::map<std::pair<int, int>, PassState> passes;  // (micro-batch, chunk)
  torch::Tensor loss_sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  // Note [Experts in pipeline stages]: this stage's auxiliary losses, and
  // the gradient they take in a backward that does not start at the loss.
  torch::Tensor auxiliary_sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  LossGradientScale* auxiliary_gradient = family_->auxiliary_loss_gradient();
  const auto start = std::chrono::steady_clock::now();
  for (const PipeInstruction& instruction : stream_) {
    const auto began = std::chrono::steady_clock::now();
    const int virtual_stage = instruction.chunk * S + stage_;
    try {
      if (instruction.op == PipeOp::kForward) {
        PassState& pass = passes[{instruction.micro_batch, instruction.chunk}];
        if (instruction.micro_batch == fail_forward_) {
          fail_forward_ = -1;
          TORCH_CHECK(false, "injected failure (dsrank --raise_at_step)");
        }
        if (virtual_stage > 0) pass.input.requires_grad_(true);
        (void)family_->TakeAuxiliaryLoss();  // a recomputation's, in an earlier backward
        pass.output = StageForward(boundaries_[virtual_stage], boundaries_[virtual_stage + 1] - 1, pass.input,
                                   batches[instruction.micro_batch]);
        if (virtual_stage == last_virtual) loss_sum += pass.output.detach().to(torch::kDouble).reshape({1});
        if (torch::Tensor auxiliary = family_->TakeAuxiliaryLoss(); auxiliary.defined()) {
          auxiliary_sum += auxiliary.to(device_).reshape({1});
        }
      } else if (instruction.op == PipeOp::kBackward) {
        PassState& pass = passes[{instruction.micro_batch, instruction.chunk}];
        // Virtual stage 0 of an interleaved LoRA cut may hold only the frozen
        // embedding: nothing in it trains and no gradient goes back.
        const bool nothing_to_do = virtual_stage == 0 && !pass.output.requires_grad();
        if (auxiliary_gradient != nullptr) {
          auxiliary_gradient->scale = torch::full({}, engine_->loss_gradient_factor(),
                                                  torch::TensorOptions().dtype(torch::kFloat).device(device_));
        }
        absl::Status backward = nothing_to_do                  ? absl::OkStatus()
                                : virtual_stage == last_virtual ? engine_->Backward(pass.output)
                                                                : engine_->BackwardFrom(pass.output, pass.gradient);
        if (!backward.ok()) {
          return absl::Status(backward.code(), absl::StrCat(Where(instruction), ": ", backward.message()));
        }
        pass.output = torch::Tensor();
        pass.gradient = torch::Tensor();
        if (virtual_stage == 0) passes.erase({instruction.micro_batch, instruction.chunk});
      } else if (absl::Status s = Exchange(instruction, batches, passes); !s.ok()) {
        return s;
      }
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat(Where(instruction), ": ", e.what_without_backtrace()));
    }
    // Note [Measured bubble]: on a GPU the host returns before the kernels
    // end; the breakdown waits for them, so that a pass is its kernels' time.
    if (synchronized_timing_) compat::SynchronizeDevice(device_);
    const double took = Seconds(began);
    (instruction.op == PipeOp::kForward    ? result.forward_seconds
     : instruction.op == PipeOp::kBackward ? result.backward_seconds
                                           : result.transfer_seconds) += took;
    result.timeline.push_back(PipelineEvent{DescribeInstruction(instruction),
                                            std::chrono::duration<double, std::micro>(began - start).count(),
                                            took * 1e6});
  }
  result.schedule_seconds = Seconds(start);
  result.recomputed_segments = std::exchange(recomputed_segments_, 0);
  result.released_output_bytes = std::exchange(released_output_bytes_, 0);
  const auto stepping = std::chrono::steady_clock::now();
  if (absl::Status s = ReduceTiedGradients(); !s.ok()) return s;
  // The engine counts micro-batches: every one but the last only advances
  // the count (a pipeline's gradients stay put until the boundary).
  for (int m = 0; m < shape_.micro_batches; ++m) {
    absl::StatusOr<StepResult> step = engine_->Step();
    if (!step.ok()) return absl::Status(step.status().code(), absl::StrCat("pipeline stage ", stage_, ": ", step.status().message()));
    result.step = *step;
  }
  result.step_seconds = Seconds(stepping);
  // The mean loss, summed over the stages: the last stage's losses and
  // every stage's auxiliary losses (Note [Experts in pipeline stages]).
  loss_sum += auxiliary_sum;
  loss_sum /= static_cast<double>(shape_.micro_batches);
  if (pipeline_ != nullptr) {
    if (absl::Status s = pipeline_->AllReduce(loss_sum, ReduceOp::kSum); !s.ok()) return s;
  }
  result.loss = loss_sum.item<double>();
  return result;
}

std::vector<double> StageBubbleFractions(const std::vector<double>& busy, const std::vector<double>& window) {
  const double step = window.empty() ? 0.0 : *std::max_element(window.begin(), window.end());
  std::vector<double> bubbles;
  for (double b : busy) bubbles.push_back(step > 0 ? 1.0 - b / step : 0.0);
  return bubbles;
}

torch::Tensor PipelineEngine::StageForward(int first, int last, const torch::Tensor& input, const TokenBatch& batch) {
  if (interval_ == 0 || !model_->is_training() || !torch::GradMode::is_enabled()) {
    return family_->ForwardLayers(first, last, input, batch);
  }
  torch::Tensor x = input;
  int layer = first;
  if (layer == 0) {  // the embedding
    x = family_->ForwardLayers(0, 0, x, batch);
    layer = 1;
  }
  const int last_decoder = std::min(last, head_layer_ - 1);
  const CheckpointStorage storage = family_->RecomputeStorage();
  while (layer <= last_decoder) {
    const int end = std::min(layer + interval_ - 1, last_decoder);
    // By value: recomputed in backward, after other micro-batches' forwards.
    ModelInterface* family = family_;
    int* recomputed = &recomputed_segments_;
    Segment segment = [family, layer, end, batch, recomputed](const torch::Tensor& in) {
      // CheckpointedForward runs the forward without a graph and the
      // recomputation with one.
      if (torch::GradMode::is_enabled()) ++*recomputed;
      return family->ForwardLayers(layer, end, in, batch);
    };
    x = CheckpointedForward(segment, x, storage, family_->dropout_stream());
    layer = end + 1;
  }
  if (last == head_layer_) x = family_->ForwardLayers(head_layer_, head_layer_, x, batch);
  return x;
}

absl::StatusOr<double> PipelineEngine::EvalBatch(const std::vector<TokenBatch>& micro_batches) {
  const int S = shape_.stages;
  const int last_virtual = shape_.virtual_count() - 1;
  torch::Tensor loss_sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    const TokenBatch batch = ToDevice(micro_batches[m], device_);
    // Virtual stages in order: a chain, each link one blocking transfer.
    for (int v = stage_; v <= last_virtual; v += S) {
      try {
        torch::Tensor input;
        if (v > 0) {
          input = torch::empty(family_->ActivationShape(batch),
                               torch::TensorOptions().dtype(engine_->compute_dtype()).device(device_));
          std::vector<PeerTransfer> receive{{PeerTransfer::Kind::kRecv, input, (v - 1) % S}};
          if (absl::Status s = pipeline_->SendRecv(receive); !s.ok()) {
            return absl::Status(s.code(), absl::StrCat("pipeline stage ", stage_, ", evaluation micro-batch ", m, ": ",
                                                       s.message()));
          }
        }
        torch::Tensor output = family_->ForwardLayers(boundaries_[v], boundaries_[v + 1] - 1, input, batch);
        if (v == last_virtual) {
          loss_sum += output.detach().to(torch::kDouble).reshape({1});
        } else {
          std::vector<PeerTransfer> send{{PeerTransfer::Kind::kSend, output.contiguous(), (v + 1) % S}};
          if (absl::Status s = pipeline_->SendRecv(send); !s.ok()) {
            return absl::Status(s.code(), absl::StrCat("pipeline stage ", stage_, ", evaluation micro-batch ", m, ": ",
                                                       s.message()));
          }
        }
      } catch (const c10::Error& e) {
        return absl::InternalError(absl::StrCat("pipeline stage ", stage_, ", evaluation micro-batch ", m, ": ",
                                                e.what_without_backtrace()));
      }
    }
  }
  loss_sum /= static_cast<double>(std::max<size_t>(1, micro_batches.size()));
  if (pipeline_ != nullptr) {
    if (absl::Status s = pipeline_->Broadcast(loss_sum, S - 1); !s.ok()) return s;
  }
  return loss_sum.item<double>();
}

absl::StatusOr<std::vector<std::vector<double>>> PipelineEngine::GatherOverStages(const std::vector<double>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  torch::Tensor mine = torch::tensor(values, options).to(device_);
  torch::Tensor all = torch::zeros({shape_.stages * n}, options.device(device_));
  if (pipeline_ != nullptr) {
    if (absl::Status s = pipeline_->AllGather(mine, all); !s.ok()) return s;
  } else {
    all.copy_(mine);
  }
  all = all.to(torch::kCPU);
  std::vector<std::vector<double>> out(shape_.stages);
  for (int stage = 0; stage < shape_.stages; ++stage) {
    for (int64_t i = 0; i < n; ++i) out[stage].push_back(all[stage * n + i].item<double>());
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<PipelineEvent>>> PipelineEngine::GatherTimelines(
    const std::vector<PipelineEvent>& mine) {
  // Each stage's events as text lines, "start<TAB>duration<TAB>name".
  auto encode = [](const std::vector<PipelineEvent>& events) {
    std::string text;
    for (const PipelineEvent& e : events) absl::StrAppend(&text, e.start_us, "\t", e.duration_us, "\t", e.name, "\n");
    return text;
  };
  auto decode = [](const std::string& text) {
    std::vector<PipelineEvent> events;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits('\t', 2));
      if (parts.size() != 3) continue;
      PipelineEvent e;
      e.name = parts[2];
      (void)absl::SimpleAtod(parts[0], &e.start_us);
      (void)absl::SimpleAtod(parts[1], &e.duration_us);
      events.push_back(std::move(e));
    }
    return events;
  };
  std::vector<std::vector<PipelineEvent>> all;
  if (pipeline_ == nullptr) {
    all.push_back(mine);
    return all;
  }
  const auto long_options = torch::TensorOptions().dtype(torch::kLong).device(device_);
  const auto byte_options = torch::TensorOptions().dtype(torch::kUInt8).device(device_);
  if (stage_ != 0) {
    const std::string text = encode(mine);
    torch::Tensor length = torch::full({1}, static_cast<int64_t>(text.size()), long_options);
    torch::Tensor bytes = torch::from_blob(const_cast<char*>(text.data()), {static_cast<int64_t>(text.size())},
                                           torch::kUInt8).to(device_).clone();
    std::vector<PeerTransfer> sizes{{PeerTransfer::Kind::kSend, length, 0}};
    if (absl::Status s = pipeline_->SendRecv(sizes); !s.ok()) return s;
    std::vector<PeerTransfer> body{{PeerTransfer::Kind::kSend, bytes, 0}};
    if (!text.empty()) {
      if (absl::Status s = pipeline_->SendRecv(body); !s.ok()) return s;
    }
    return all;
  }
  all.push_back(mine);
  std::vector<torch::Tensor> lengths;
  std::vector<PeerTransfer> sizes;
  for (int stage = 1; stage < shape_.stages; ++stage) {
    lengths.push_back(torch::zeros({1}, long_options));
    sizes.push_back({PeerTransfer::Kind::kRecv, lengths.back(), stage});
  }
  if (absl::Status s = pipeline_->SendRecv(sizes); !s.ok()) return s;
  std::vector<torch::Tensor> bodies;
  std::vector<PeerTransfer> receives;
  for (int stage = 1; stage < shape_.stages; ++stage) {
    bodies.push_back(torch::zeros({lengths[stage - 1].item<int64_t>()}, byte_options));
    if (bodies.back().numel() > 0) receives.push_back({PeerTransfer::Kind::kRecv, bodies.back(), stage});
  }
  if (!receives.empty()) {
    if (absl::Status s = pipeline_->SendRecv(receives); !s.ok()) return s;
  }
  for (torch::Tensor& body : bodies) {
    torch::Tensor host = body.to(torch::kCPU).contiguous();
    all.push_back(decode(std::string(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()), host.numel())));
  }
  return all;
}

absl::Status WritePipelineTimeline(const std::string& path, const std::vector<std::vector<PipelineEvent>>& timelines) {
  std::ofstream out(path);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("--pipeline_timeline ", path, ": cannot open for writing"));
  out << "{\"traceEvents\": [\n";
  bool first = true;
  for (size_t stage = 0; stage < timelines.size(); ++stage) {
    out << (first ? "" : ",\n") << "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": " << stage
        << ", \"args\": {\"name\": \"stage " << stage << "\"}}";
    first = false;
    for (const PipelineEvent& e : timelines[stage]) {
      out << ",\n{\"name\": \"" << e.name << "\", \"ph\": \"X\", \"pid\": 0, \"tid\": " << stage
          << ", \"ts\": " << e.start_us << ", \"dur\": " << e.duration_us << "}";
    }
  }
  out << "\n]}\n";
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("--pipeline_timeline ", path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime

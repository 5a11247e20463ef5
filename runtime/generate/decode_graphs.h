// Note [Decode graphs]: with cuda_graphs on (dsgen and dsserve
// --cuda_graphs), a decode step (every running sequence decodes one token,
// no prompt piece in the step) is the replay of a CUDA graph. For a 7B model
// the cached forward is about a thousand kernels, and LibTorch's dispatch of
// them one by one takes the host several times longer than the GPU needs to
// run them (Note [Continuous batching]: the step is host-bound); a replay
// enqueues them all with one call.
//
// A graph is fixed to its tensors' shapes and addresses. One is recorded per
// (sequences, padded key length) the first time a step has them; the key
// length is padded to key_length_multiple (Note [Paged key/value cache]), so
// a sequence meets a new graph every 128 positions, not every token. Its
// inputs live in one int64 tensor on the device that each step overwrites
// with one copy: the tokens, their positions, the slots they write, each
// sequence's end and the slots it reads (PagedKvCache::PlanDecodes). The
// recorded forward reads nothing else that changes: the rotary table is the
// model's whole-context one (LlamaImpl::CachedRotary) and the mask is
// computed on the device from the ends (PagedKvCache::DecodeStep). Steps with
// prompt pieces run as before. At most max_graphs graphs are held, the least
// recently used dropped first; they share one memory pool, as the steps
// replay one at a time.
//
// Not with tensor parallelism (the collectives are not captured), mixture of
// experts (routing reads sizes on the host) or dynamic NTK scaling (the
// rotary table changes past the context): the engine refuses those at Create.
//
// The recorder is the seam: CUDA graphs on a GPU; on the CPU, a recorder that
// runs the recorded function again at each replay, so CPU tests check that
// every input reaches the step through the buffers and that replayed steps
// give the eager steps' tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/generate/paged_kv_cache.h"
#include "runtime/model/llama.h"

namespace dslaunch::runtime {

class RecordedStep {
 public:
  virtual ~RecordedStep() = default;
  // Runs the recorded work again; output() then holds its result.
  virtual void Replay() = 0;
  virtual const torch::Tensor& output() const = 0;
};

class StepRecorder {
 public:
  virtual ~StepRecorder() = default;
  // Records what `body` does. `body` reads only tensors it holds, and waits on
  // nothing on the host.
  virtual absl::StatusOr<std::unique_ptr<RecordedStep>> Record(std::function<torch::Tensor()> body) = 0;
};

// CUDA graphs on `device`, all in one memory pool.
std::unique_ptr<StepRecorder> CudaGraphRecorder(const torch::Device& device);
// The CPU stand-in: a replay calls the function again, writing its result
// into the first call's tensor.
std::unique_ptr<StepRecorder> RerunRecorder();

class DecodeGraphs {
 public:
  DecodeGraphs(Llama model, PagedKvCache& cache, std::unique_ptr<StepRecorder> recorder, int64_t max_graphs);

  // The logits [d, vocabulary] of a decode step, on the model's device (the
  // recorded step's output: valid until the next Run): `pieces` one token
  // each (a sequence's newest), `tokens` those tokens.
  absl::StatusOr<torch::Tensor> Run(const std::vector<StepPiece>& pieces, const std::vector<int64_t>& tokens);

  int64_t recorded() const { return recorded_; }  // graphs recorded, dropped ones too
  int64_t held() const { return static_cast<int64_t>(graphs_.size()); }

 private:
  struct Graph {
    torch::Tensor inputs;   // on the device: tokens, positions, written, ends [d] each; visible [d · longest]
    torch::Tensor staging;  // on the host (pinned with CUDA), what the next step copies in
    std::unique_ptr<RecordedStep> step;
    uint64_t last_used = 0;
  };
  absl::StatusOr<Graph> Record(int64_t sequences, int64_t longest, const torch::Tensor& staged);

  Llama model_;
  PagedKvCache& cache_;
  std::unique_ptr<StepRecorder> recorder_;
  int64_t max_graphs_;
  torch::Device device_;
  std::map<std::pair<int64_t, int64_t>, Graph> graphs_;  // by (sequences, longest)
  uint64_t uses_ = 0;
  int64_t recorded_ = 0;
};

}  // namespace dslaunch::runtime

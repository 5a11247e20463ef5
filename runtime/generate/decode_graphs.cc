#include "runtime/generate/decode_graphs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

namespace {

class CudaGraphStep final : public RecordedStep {
 public:
  void Replay() override { graph.Replay(); }
  const torch::Tensor& output() const override { return result; }
  compat::CudaGraph graph;
  torch::Tensor result;
};

class CudaGraphStepRecorder final : public StepRecorder {
 public:
  explicit CudaGraphStepRecorder(const torch::Device& device) : device_(device), pool_(compat::NewCudaGraphPool()) {}
  absl::StatusOr<std::unique_ptr<RecordedStep>> Record(std::function<torch::Tensor()> body) override {
    auto step = std::make_unique<CudaGraphStep>();
    auto result = step->graph.Capture(body, pool_, device_);
    if (!result.ok()) return result.status();
    step->result = *result;
    return std::unique_ptr<RecordedStep>(std::move(step));
  }

 private:
  torch::Device device_;
  compat::CudaGraphPool pool_;
};

class RerunStep final : public RecordedStep {
 public:
  explicit RerunStep(std::function<torch::Tensor()> body) : body_(std::move(body)), result_(body_()) {}
  void Replay() override { result_.copy_(body_()); }
  const torch::Tensor& output() const override { return result_; }

 private:
  std::function<torch::Tensor()> body_;
  torch::Tensor result_;
};

class RerunStepRecorder final : public StepRecorder {
 public:
  absl::StatusOr<std::unique_ptr<RecordedStep>> Record(std::function<torch::Tensor()> body) override {
    try {
      return std::unique_ptr<RecordedStep>(std::make_unique<RerunStep>(std::move(body)));
    } catch (const c10::Error& e) {
      return absl::InternalError(e.what_without_backtrace());
    }
  }
};

}  // namespace

std::unique_ptr<StepRecorder> CudaGraphRecorder(const torch::Device& device) {
  return std::make_unique<CudaGraphStepRecorder>(device);
}

std::unique_ptr<StepRecorder> RerunRecorder() { return std::make_unique<RerunStepRecorder>(); }

DecodeGraphs::DecodeGraphs(Llama model, PagedKvCache& cache, std::unique_ptr<StepRecorder> recorder,
                           int64_t max_graphs)
    : model_(std::move(model)),
      cache_(cache),
      recorder_(std::move(recorder)),
      max_graphs_(std::max<int64_t>(1, max_graphs)),
      device_(model_->parameters().front().device()) {}

absl::StatusOr<torch::Tensor> DecodeGraphs::Run(const std::vector<StepPiece>& pieces,
                                                const std::vector<int64_t>& tokens) {
  auto tables = cache_.PlanDecodes(pieces);
  if (!tables.ok()) return tables.status();
  const int64_t d = static_cast<int64_t>(pieces.size());
  const int64_t longest = tables->longest;
  if (d == 0 || static_cast<int64_t>(tokens.size()) != d) {
    return absl::InvalidArgumentError(
        absl::StrCat("a decode step of ", d, " sequences takes as many tokens (got ", tokens.size(), ")"));
  }
  const std::pair<int64_t, int64_t> key{d, longest};
  auto it = graphs_.find(key);
  const bool fresh = it == graphs_.end();
  if (fresh) {
    if (held() >= max_graphs_) {
      auto oldest = std::min_element(graphs_.begin(), graphs_.end(), [](const auto& a, const auto& b) {
        return a.second.last_used < b.second.last_used;
      });
      graphs_.erase(oldest);
    }
    Graph graph;
    const int64_t size = 4 * d + d * longest;
    graph.inputs = torch::empty({size}, torch::TensorOptions().dtype(torch::kLong).device(device_));
    graph.staging = torch::empty({size}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(device_.is_cuda()));
    it = graphs_.emplace(key, std::move(graph)).first;
  }
  Graph& graph = it->second;
  graph.last_used = ++uses_;
  int64_t* staged = graph.staging.data_ptr<int64_t>();
  for (int64_t i = 0; i < d; ++i) {
    staged[i] = tokens[i];
    staged[d + i] = pieces[i].first;
    staged[2 * d + i] = tables->written[i];
    staged[3 * d + i] = tables->ends[i];
  }
  std::copy(tables->visible.begin(), tables->visible.end(), staged + 4 * d);
  graph.inputs.copy_(graph.staging, /*non_blocking=*/true);
  if (fresh) {
    // Everything the step reads that changes comes from `inputs`.
    std::function<torch::Tensor()> body = [model = model_, cache = &cache_, inputs = graph.inputs, d,
                                           longest]() mutable {
      auto part = [&](int64_t at, int64_t count) { return inputs.narrow(0, at, count); };
      std::unique_ptr<PagedKvCache::Step> step =
          cache->DecodeStep(part(2 * d, d), part(4 * d, d * longest).view({d, longest}), part(3 * d, d));
      // Every position is within the context (GenerationEngine::CheckRequest),
      // so the rotary table is the whole context's, the same at every replay.
      return model->ForwardWithCache(part(0, d).view({1, d}), part(d, d), *step, torch::arange(d, inputs.options()),
                                     model->options().rope.max_position_embeddings);
    };
    auto step = recorder_->Record(std::move(body));
    if (!step.ok()) {
      graphs_.erase(it);
      return absl::Status(step.status().code(),
                          absl::StrCat("recording the decode step of ", d, " sequences over ", longest,
                                       " keys as a CUDA graph: ", step.status().message(),
                                       " (generate without cuda_graphs)"));
    }
    graph.step = std::move(*step);
    ++recorded_;
  }
  graph.step->Replay();
  return graph.step->output();
}

}  // namespace dslaunch::runtime

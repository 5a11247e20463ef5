// Note [Streamed layer weights].
#include "runtime/generate/streamed_layer_weights.h"

#include <unordered_set>

#include "absl/strings/str_format.h"

namespace dslaunch::runtime {
namespace {

constexpr int64_t kAlignment = 256;  // bytes: every tensor's offset in a slot

int64_t Aligned(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// Every tensor of `module` the forward reads (parameters and buffers, once
// each), with its offset in the layer's buffer.
struct Placed {
  torch::Tensor tensor;
  int64_t offset = 0;
};

std::vector<Placed> PlaceTensors(const torch::nn::Module& module, int64_t* total) {
  std::vector<Placed> placed;
  std::unordered_set<const void*> seen;
  int64_t offset = 0;
  auto add = [&](const torch::Tensor& tensor) {
    if (!tensor.defined() || !seen.insert(tensor.unsafeGetTensorImpl()).second) return;
    placed.push_back({tensor, offset});
    offset = Aligned(offset + static_cast<int64_t>(tensor.numel() * tensor.element_size()));
  };
  for (const torch::Tensor& tensor : module.parameters(/*recurse=*/true)) add(tensor);
  for (const torch::Tensor& tensor : module.buffers(/*recurse=*/true)) add(tensor);
  *total = offset;
  return placed;
}

// `tensor`'s shape and dtype over `bytes` from `offset` (uint8, contiguous).
torch::Tensor ViewAs(const torch::Tensor& bytes, int64_t offset, const torch::Tensor& tensor) {
  const int64_t length = static_cast<int64_t>(tensor.numel() * tensor.element_size());
  return bytes.narrow(0, offset, length).view(tensor.scalar_type()).view(tensor.sizes());
}

}  // namespace

absl::StatusOr<std::shared_ptr<StreamedLayerWeights>> StreamedLayerWeights::Install(Llama& model,
                                                                                    const torch::Device& device) {
  torch::NoGradGuard no_grad;
  auto& layers = *model->model->layers;
  if (layers.size() == 0) return absl::InvalidArgumentError("streamed layer weights: the model has no decoder layer");
  for (const torch::Tensor& tensor : model->parameters()) {
    if (!tensor.device().is_cpu()) {
      return absl::FailedPreconditionError("streamed layer weights: the model must be in host memory before they stream");
    }
  }
  auto streamer = std::shared_ptr<StreamedLayerWeights>(new StreamedLayerWeights(device));
  std::vector<std::vector<Placed>> placed(layers.size());
  std::unordered_set<const void*> in_layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    int64_t bytes = 0;
    placed[i] = PlaceTensors(*layers[i], &bytes);
    for (const Placed& p : placed[i]) in_layers.insert(p.tensor.unsafeGetTensorImpl());
    streamer->slot_bytes_ = std::max(streamer->slot_bytes_, std::max<int64_t>(bytes, kAlignment));
  }
  try {
    const auto byte_options = torch::TensorOptions().dtype(torch::kUInt8);
    for (auto& slot : streamer->slots_) slot = torch::empty({streamer->slot_bytes_}, byte_options.device(device));
    // The allocator may hand out memory the compute stream's queued work
    // still reads: the first copies wait for it too.
    for (auto& released : streamer->released_) released = compat::StreamPoint::OnCurrentStream(device);
    // Layer by layer, so the host holds the model and one layer's copy at most.
    for (size_t i = 0; i < layers.size(); ++i) {
      int64_t bytes = 0;
      for (const Placed& p : placed[i]) {
        bytes = std::max<int64_t>(bytes, p.offset + static_cast<int64_t>(p.tensor.numel() * p.tensor.element_size()));
      }
      torch::Tensor host = torch::empty({std::max<int64_t>(bytes, 1)}, byte_options.pinned_memory(device.is_cuda()));
      for (Placed& p : placed[i]) {
        ViewAs(host, p.offset, p.tensor).copy_(p.tensor);
        p.tensor.set_data(ViewAs(streamer->slots_[i % 2], p.offset, p.tensor));
      }
      streamer->host_bytes_ += host.numel();
      streamer->host_.push_back(std::move(host));
    }
    // The rest of the model (embedding, final norm, head) to the device.
    auto move = [&](const torch::Tensor& tensor) {
      if (tensor.defined() && !in_layers.count(tensor.unsafeGetTensorImpl()) && tensor.device() != device) {
        torch::Tensor moving = tensor;
        moving.set_data(tensor.to(device));
      }
    };
    for (const torch::Tensor& tensor : model->parameters()) move(tensor);
    for (const torch::Tensor& tensor : model->buffers()) move(tensor);
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("streamed layer weights on ", device.str(), ": ", e.what_without_backtrace()));
  }
  // The first two layers, before the first forward asks.
  for (int64_t i = 0; i < std::min<int64_t>(2, streamer->layers()); ++i) streamer->Load(i);
  model->SetLayerResidency(streamer);
  return streamer;
}

StreamedLayerWeights::~StreamedLayerWeights() {
  try {
    for (const compat::StreamPoint& copied : copied_) copied.WaitOnHost();
  } catch (const c10::Error&) {
    // A device already in error (or torn down): nothing is left to wait for.
  }
}

void StreamedLayerWeights::Load(int64_t layer) {
  const int slot = static_cast<int>(layer % 2);
  const torch::Tensor& host = host_[static_cast<size_t>(layer)];
  copies_.Run([&] {
    released_[slot].BlockCurrentStream();  // the compute stream's last read of the slot's former layer
    slots_[slot].narrow(0, 0, host.numel()).copy_(host, /*non_blocking=*/true);
    copied_[slot] = compat::StreamPoint::OnCurrentStream(device_);
  });
  slot_layer_[slot] = layer;
  copied_bytes_ += host.numel();
}

void StreamedLayerWeights::BeforeLayer(int64_t layer) {
  const int slot = static_cast<int>(layer % 2);
  if (slot_layer_[slot] != layer) Load(layer);  // a pass out of the usual order
  copied_[slot].BlockCurrentStream();
}

void StreamedLayerWeights::AfterLayer(int64_t layer) {
  const int slot = static_cast<int>(layer % 2);
  released_[slot] = compat::StreamPoint::OnCurrentStream(device_);
  // The next layer, in the order 0 .. L-1 and round again, that uses this slot.
  int64_t next = layer;
  do {
    next = (next + 1) % layers();
  } while (next % 2 != slot);
  if (slot_layer_[slot] != next) Load(next);
}

std::string StreamedLayerWeights::Describe() const {
  return absl::StrFormat(
      "ZeRO-Inference: %d decoder layers' weights in host memory%s (%.2f GB), streamed through 2 layer slots on %s "
      "(%.2f GB)",
      layers(), device_.is_cuda() ? ", pinned," : "", host_bytes_ / 1e9, device_.str(), device_bytes() / 1e9);
}

}  // namespace dslaunch::runtime

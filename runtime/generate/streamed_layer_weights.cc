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

absl::StatusOr<std::shared_ptr<StreamedLayerWeights>> StreamedLayerWeights::Install(
    Llama& model, const torch::Device& device, const StreamedLayerWeightsOptions& options) {
  torch::NoGradGuard no_grad;
  auto& layers = *model->model->layers;
  if (layers.size() == 0) return absl::InvalidArgumentError("streamed layer weights: the model has no decoder layer");
  if (options.home != "cpu" && options.home != "nvme") {
    return absl::InvalidArgumentError(
        absl::StrCat("streamed layer weights: home '", options.home, "' is neither cpu nor nvme"));
  }
  for (const torch::Tensor& tensor : model->parameters()) {
    if (!tensor.device().is_cpu()) {
      return absl::FailedPreconditionError("streamed layer weights: the model must be in host memory before they stream");
    }
  }
  auto streamer = std::shared_ptr<StreamedLayerWeights>(new StreamedLayerWeights(device));
  streamer->layer_count_ = static_cast<int64_t>(layers.size());
  std::vector<std::vector<Placed>> placed(layers.size());
  std::vector<int64_t> layer_bytes(layers.size());
  std::unordered_set<const void*> in_layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    int64_t bytes = 0;
    placed[i] = PlaceTensors(*layers[i], &bytes);
    for (const Placed& p : placed[i]) {
      in_layers.insert(p.tensor.unsafeGetTensorImpl());
      layer_bytes[i] =
          std::max<int64_t>(layer_bytes[i], p.offset + static_cast<int64_t>(p.tensor.numel() * p.tensor.element_size()));
    }
    layer_bytes[i] = std::max<int64_t>(layer_bytes[i], 1);
    streamer->slot_bytes_ = std::max(streamer->slot_bytes_, std::max<int64_t>(bytes, kAlignment));
  }
  if (options.home == "nvme") {
    auto files = SwappedPieces::Create(options.files, layer_bytes, /*pinned=*/device.is_cuda());
    if (!files.ok()) return files.status();
    streamer->files_ = std::move(*files);
  }
  try {
    const auto byte_options = torch::TensorOptions().dtype(torch::kUInt8);
    for (auto& slot : streamer->slots_) slot = torch::empty({streamer->slot_bytes_}, byte_options.device(device));
    // The allocator may hand out memory the compute stream's queued work
    // still reads: the first copies wait for it too.
    for (auto& released : streamer->released_) released = compat::StreamPoint::OnCurrentStream(device);
    // Layer by layer, so the host holds the model and one layer's copy at most.
    for (size_t i = 0; i < layers.size(); ++i) {
      const bool pinned = device.is_cuda() && !streamer->files_;
      torch::Tensor host = torch::zeros({layer_bytes[i]}, byte_options.pinned_memory(pinned));
      for (Placed& p : placed[i]) {
        ViewAs(host, p.offset, p.tensor).copy_(p.tensor);
        p.tensor.set_data(ViewAs(streamer->slots_[i % 2], p.offset, p.tensor));
      }
      streamer->layer_bytes_ += host.numel();
      if (streamer->files_) {
        // The layer's host copy goes once its file is written.
        if (absl::Status written = streamer->files_->Write(static_cast<int64_t>(i), host); !written.ok()) {
          return written;
        }
      } else {
        streamer->host_.push_back(std::move(host));
      }
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
  try {
    for (int64_t i = 0; i < std::min<int64_t>(2, streamer->layers()); ++i) streamer->Load(i);
  } catch (const c10::Error& e) {
    return absl::DataLossError(e.what_without_backtrace());
  }
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

int64_t StreamedLayerWeights::NextInSlot(int64_t layer) const {
  int64_t next = layer;
  do {
    next = (next + 1) % layers();
  } while (next % 2 != layer % 2);
  return next;
}

void StreamedLayerWeights::Load(int64_t layer) {
  const int slot = static_cast<int>(layer % 2);
  torch::Tensor source;
  if (files_) {
    if (files_->pending(slot) != layer) {
      // A pass out of the usual order: the read ahead is not this layer's.
      // Its result is not needed (a changed file is met again when it is;
      // an I/O error stays: BlockIo's errors are sticky).
      if (files_->pending(slot) >= 0) (void)files_->FinishRead(slot);
      files_->StartRead(layer, slot);
    }
    absl::StatusOr<torch::Tensor> read = files_->FinishRead(slot);
    TORCH_CHECK(read.ok(), "ZeRO-Inference from NVMe, layer ", layer, ": ", std::string(read.status().message()));
    source = *read;
  } else {
    source = host_[static_cast<size_t>(layer)];
  }
  copies_.Run([&] {
    released_[slot].BlockCurrentStream();  // the compute stream's last read of the slot's former layer
    slots_[slot].narrow(0, 0, source.numel()).copy_(source, /*non_blocking=*/true);
    copied_[slot] = compat::StreamPoint::OnCurrentStream(device_);
  });
  slot_layer_[slot] = layer;
  copied_bytes_ += source.numel();
  if (files_) {
    // The staging buffer is free once its copy is done (which waits for the
    // device to finish the slot's former layer: the host waits here, and the
    // copy does not overlap compute); then the drive reads the slot's next
    // layer into it while the device computes the layers between.
    copied_[slot].WaitOnHost();
    if (const int64_t next = NextInSlot(layer); next != layer) files_->StartRead(next, slot);
  }
}

void StreamedLayerWeights::BeforeLayer(int64_t layer) {
  const int slot = static_cast<int>(layer % 2);
  if (slot_layer_[slot] != layer) Load(layer);  // a pass out of the usual order
  copied_[slot].BlockCurrentStream();
}

void StreamedLayerWeights::AfterLayer(int64_t layer) {
  const int slot = static_cast<int>(layer % 2);
  released_[slot] = compat::StreamPoint::OnCurrentStream(device_);
  if (const int64_t next = NextInSlot(layer); slot_layer_[slot] != next) Load(next);
}

std::string StreamedLayerWeights::Describe() const {
  const std::string home =
      files_ ? absl::StrFormat("on NVMe: %s, read through 2 %sstaging buffers (%.2f GB),", files_->Describe(),
                               device_.is_cuda() ? "pinned " : "", files_->staging_bytes() / 1e9)
             : absl::StrFormat("in host memory%s (%.2f GB),", device_.is_cuda() ? ", pinned" : "", layer_bytes_ / 1e9);
  return absl::StrFormat("ZeRO-Inference: %d decoder layers' weights %s streamed through 2 layer slots on %s (%.2f GB)",
                         layers(), home, device_.str(), device_bytes() / 1e9);
}

}  // namespace dslaunch::runtime

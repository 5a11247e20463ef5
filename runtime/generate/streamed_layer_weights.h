// Note [Streamed layer weights] (ZeRO-Inference): generation with a model
// larger than the GPU's memory, as DeepSpeed's ZeRO-Inference does
// (zero_optimization.stage 3 with offload_param.device "cpu"): every decoder
// layer's weights live in host memory, pinned, one flat buffer per layer,
// and are copied to the device just before the layer runs. The embedding,
// the final norm and the head stay on the device.
//
//  - Two device slots, each as large as the largest layer: layer i's
//    tensors (parameters and buffers: int8 values and scales too, and
//    unmerged LoRA adapters) are views of slot i % 2, at offsets aligned to
//    256 bytes, from Install on. The model reads them as it reads any
//    weight; which layer a slot holds is the streamer's business.
//  - The copies run on a stream of their own. Once layer i ran
//    (AfterLayer), the next layer that uses its slot, in the order
//    0 .. L-1 and round again (i + 2, or the wrap into the next forward),
//    is copied into it, after the compute stream's last read of layer i;
//    BeforeLayer makes the compute stream wait for the copy of its layer
//    (issuing it first when the order was another one). So layer i + 1
//    computes while layer i + 2 crosses PCIe, and nothing waits on the
//    host. A decode step reads the whole model over PCIe: batch-1 decoding
//    is bound by the link (about 13.5 GB a step for a 7B model in bf16),
//    and large batches share that cost; ZeRO-Inference is the throughput
//    mode DeepSpeed says it is.
//  - Device memory: two layers of weights, beside the rest of the model and
//    the key/value cache. Host memory: the decoder layers once (the model's
//    former copy of each layer is released as that layer moves in); on a
//    GPU, LibTorch's pinned-memory allocator rounds each layer's buffer up
//    to a power of two (a 7B layer's 405 MB takes 512 MB), which
//    host_bytes() does not count.
//  - Not with CUDA graphs (the copies are issued by the host between
//    layers), nor joined projections (Note [Joined projections]: a joined
//    weight would be a second, device-resident copy): the engine checks.
//  - On a CPU device the "host" and "device" are one memory and the copies
//    run as they come: the schedule and the placement are what the CPU
//    tests check, bit for bit against the model left whole.
//  - With home "nvme" (Note [Pieces on NVMe], offload/swapped_pieces.h)
//    the layers live in files instead of host memory: a slot's load waits
//    for its layer's read (queued when the slot's previous copy finished,
//    so the drive reads ahead while the GPU computes), checks it, copies it
//    from the pinned staging buffer, and once that copy is done queues the
//    read of the slot's next layer into the buffer. The drive bounds the
//    speed: every step reads the whole of the decoder layers from it. A
//    read that fails or a file that changed throws, naming the file, out of
//    the forward (the engine turns it into the step's error; a read error
//    fails every later step too). Split over a tensor group, the other
//    ranks then wait in the layer's collective: under dslaunch the failing
//    rank's exit ends the job.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/offload/swapped_pieces.h"
#include "runtime/model/layer_residency.h"
#include "runtime/model/llama.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

struct StreamedLayerWeightsOptions {
  // Where the layers live between their copies to the device: "cpu" (host
  // memory, pinned on a CUDA host) or "nvme" (files, options in `files`).
  std::string home = "cpu";
  SwappedPiecesOptions files;
};

class StreamedLayerWeights : public LayerResidency {
 public:
  // REQUIRES: `model` in host memory, in its final dtype (int8 already
  // applied, adapters on or merged). Moves the decoder layers' tensors into
  // their home (host buffers or files) and device slots, the rest of the
  // model to `device`, and sets itself as the model's layer residency
  // (Llama::SetLayerResidency).
  static absl::StatusOr<std::shared_ptr<StreamedLayerWeights>> Install(
      Llama& model, const torch::Device& device, const StreamedLayerWeightsOptions& options = {});
  ~StreamedLayerWeights() override;  // waits for the copies in flight

  void BeforeLayer(int64_t layer) override;
  void AfterLayer(int64_t layer) override;

  // The decoder layers' bytes: what one forward moves to the device.
  int64_t layer_bytes() const { return layer_bytes_; }
  // Host memory held: the layers (home "cpu") or the staging buffers ("nvme").
  int64_t host_bytes() const { return files_ ? files_->staging_bytes() : layer_bytes_; }
  int64_t device_bytes() const { return 2 * slot_bytes_; }
  int64_t copied_bytes() const { return copied_bytes_; }  // so far
  int64_t layers() const { return layer_count_; }
  // The files of home "nvme"; null for "cpu".
  const SwappedPieces* files() const { return files_.get(); }
  // The layer slot `slot` holds (or will once its copy is done); -1: none.
  int64_t layer_in_slot(int slot) const { return slot_layer_[slot]; }
  std::string Describe() const override;

 private:
  StreamedLayerWeights(const torch::Device& device) : device_(device), copies_(device) {}
  // Queues the copy of `layer` into its slot on the copy stream (from the
  // host, or from the staging buffer its file was read into).
  void Load(int64_t layer);
  // The layer after `layer`, in the order 0 .. L-1 and round again, that
  // uses its slot.
  int64_t NextInSlot(int64_t layer) const;

  torch::Device device_;
  compat::SideStream copies_;
  std::vector<torch::Tensor> host_;          // home "cpu", per layer: its tensors' bytes, uint8
  std::unique_ptr<SwappedPieces> files_;  // home "nvme"
  torch::Tensor slots_[2];                   // uint8, on the device
  int64_t layer_count_ = 0;
  int64_t slot_bytes_ = 0;
  int64_t layer_bytes_ = 0;
  int64_t copied_bytes_ = 0;
  int64_t slot_layer_[2] = {-1, -1};
  compat::StreamPoint copied_[2];    // on the copy stream: the slot's copy done
  compat::StreamPoint released_[2];  // on the compute stream: its last read queued
};

}  // namespace dslaunch::runtime

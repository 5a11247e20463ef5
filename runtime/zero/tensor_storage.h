// Releasing and re-allocating a tensor's memory in place (Note [ZeRO-3
// units]; Note [Outputs released once sent] in runtime/pipeline): every view
// of the tensor (a module's parameters, what autograd saved of them) shares
// the StorageImpl, so they all see the memory come and go; the tensors'
// metadata (sizes, dtype) and version counters do not change. Header-only.
#pragma once

#include <torch/torch.h>

#include <cstddef>

namespace dslaunch::runtime {

// The storage of `tensor` made `bytes` long: 0 frees it (its contents are
// lost), another size allocates fresh, uninitialised memory from the
// storage's allocator. No-op when it is that long already.
inline void ResizeStorage(const torch::Tensor& tensor, size_t bytes) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == bytes) return;
  if (bytes == 0) {
    storage->set_data_ptr_noswap(at::DataPtr(nullptr, storage->device()));
  } else {
    storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  }
  storage->set_nbytes(bytes);
}

}  // namespace dslaunch::runtime

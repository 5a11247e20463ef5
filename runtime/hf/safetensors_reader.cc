#include "runtime/hf/safetensors_reader.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

std::optional<torch::ScalarType> TorchDtypeOf(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kF32: return torch::kFloat;
    case SafetensorsDtype::kF16: return torch::kHalf;
    case SafetensorsDtype::kBF16: return torch::kBFloat16;
    case SafetensorsDtype::kF64: return torch::kDouble;
    case SafetensorsDtype::kI64: return torch::kLong;
    case SafetensorsDtype::kI32: return torch::kInt;
    case SafetensorsDtype::kI16: return torch::kShort;
    case SafetensorsDtype::kI8: return torch::kChar;
    case SafetensorsDtype::kU8: return torch::kByte;
    case SafetensorsDtype::kBool: return torch::kBool;
    case SafetensorsDtype::kUnknown: return std::nullopt;
  }
  return std::nullopt;
}

absl::StatusOr<SafetensorsDtype> SafetensorsDtypeOf(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat: return SafetensorsDtype::kF32;
    case torch::kHalf: return SafetensorsDtype::kF16;
    case torch::kBFloat16: return SafetensorsDtype::kBF16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("weights are written as F32, F16 or BF16, not ", c10::toString(dtype)));
  }
}

SafetensorsReader::SafetensorsReader(std::string path, std::unique_ptr<ReadOnlyMemoryRegion> region,
                                     SafetensorsHeader header)
    : path_(std::move(path)), region_(std::move(region)), header_(std::move(header)) {
  for (size_t i = 0; i < header_.entries.size(); ++i) index_[header_.entries[i].name] = i;
}

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(FileSystem& fs, const std::string& path) {
  auto region = fs.MapReadOnly(path);
  if (!region.ok()) return region.status();
  const auto size = static_cast<int64_t>((*region)->size());
  auto header = ParseSafetensorsHeader((*region)->data(), size, size, path);
  if (!header.ok()) return header.status();
  return std::unique_ptr<SafetensorsReader>(new SafetensorsReader(path, std::move(*region), std::move(*header)));
}

const SafetensorsEntryInfo* SafetensorsReader::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.entries[it->second];
}

absl::StatusOr<torch::Tensor> SafetensorsReader::View(const std::string& name) const {
  const SafetensorsEntryInfo* entry = Find(name);
  if (entry == nullptr) return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", name, "'"));
  std::optional<torch::ScalarType> dtype = TorchDtypeOf(entry->dtype);
  if (!dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", name, "' is ", entry->dtype_name, ", which this runtime cannot read"));
  }
  if (entry->elements() == 0) return torch::empty(entry->shape, torch::TensorOptions().dtype(*dtype));
  // The mapping is read-only; the view is only ever read (copied from).
  auto* data = const_cast<uint8_t*>(region_->data() + header_.data_start + entry->begin);
  const int64_t element_size = SafetensorsDtypeSize(entry->dtype);
  if (reinterpret_cast<uintptr_t>(data) % element_size != 0) {
    // An unaligned tensor (a header not padded to 8 bytes): copied out.
    torch::Tensor copy = torch::empty(entry->shape, torch::TensorOptions().dtype(*dtype));
    std::memcpy(copy.data_ptr(), data, entry->end - entry->begin);
    return copy;
  }
  return torch::from_blob(data, entry->shape, torch::TensorOptions().dtype(*dtype));
}

}  // namespace dslaunch::runtime

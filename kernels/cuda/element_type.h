// The element types the CUDA kernels read and write, named without CUDA or
// LibTorch headers so host code on either side can pass them.
#pragma once

#include <cstdint>

namespace dslaunch::kernels {

enum class ElementType : int32_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

inline int ElementBytes(ElementType type) { return type == ElementType::kFloat32 ? 4 : 2; }

}  // namespace dslaunch::kernels

#pragma once
/// \file tensor_info.hpp
/// \brief One named tensor of the flat parameter buffer: the entry of the tensor table that
/// the model's layout (model/parameters.hpp) builds and a model file (io/model_file.hpp) stores.
/// Plain host code (no Kokkos), so that the file readers compile without it.

#include <cstddef>
#include <string>
#include <vector>

namespace dpk {

/// One named tensor in the flat buffer: names follow DeePMD-kit's weight files,
/// `{embedding|fitting}_net{idx}_layer{l}_{w|b|idt}`; `shape`, starting at element `offset`.
struct TensorInfo {
  std::string name;
  std::vector<int> shape;
  std::size_t offset = 0;
  /// Number of scalars (product of the shape).
  std::size_t size() const {
    std::size_t n = 1;
    for (int s : shape) n *= static_cast<std::size_t>(s);
    return n;
  }
};

/// Same name, shape and offset.
inline bool operator==(TensorInfo const& a, TensorInfo const& b) {
  return a.name == b.name && a.shape == b.shape && a.offset == b.offset;
}
inline bool operator!=(TensorInfo const& a, TensorInfo const& b) { return !(a == b); }

}  // namespace dpk

#pragma once
/// \file parameters.hpp
/// \brief Named tensors of the se_e2_a + energy model inside one flat parameter buffer, and
/// their seeded initialisation (SPEC.md section 5).

#include <dpk/core/error.hpp>
#include <dpk/model/config.hpp>
#include <dpk/model/tensor_info.hpp>
#include <dpk/nn/layer.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace dpk {

/// Layout of all parameters: the tensors in order and, per network, each layer's offsets.
///
/// Two placements of the same tensors, in the same order: packed (`TensorInfo::offset`, `size`:
/// back to back, as model files, checkpoints and DeePMD-kit's weights list them, and as
/// EnergyModel::set_parameters / parameters_host exchange them) and in the model's buffers
/// (`buffer_offsets`, `buffer_size`: each tensor starting on a multiple of buffer_alignment
/// scalars, zeros between them). Rows of a weight matrix whose width is a multiple of 16 then
/// start on cache lines in the buffers, which dpk's in-place product kernels need
/// (core/small_gemm_long.hpp: the fitting nets' 1600 x 240 weights; packed, the water model's lie
/// 16 and 20 bytes off a line). Gradients and Adam moments of the gaps stay zero.
struct ParameterLayout {
  /// Scalars from one tensor's start in the buffers to the next one's at least: 64 bytes of
  /// float, two lines of double.
  static constexpr std::size_t buffer_alignment = 16;

  std::vector<TensorInfo> tensors;
  std::vector<nn::LayerShape> embedding_shapes, fitting_shapes;
  /// Packed offsets (of `tensors`), for host vectors in packed order ([net][layer], net = t_j or t_i + ntypes t_j).
  std::vector<std::vector<nn::LayerOffsets>> embedding_offsets;
  std::vector<std::vector<nn::LayerOffsets>> fitting_offsets;  ///< packed, [centre type][layer]
  std::size_t size = 0;                                        ///< scalars of all tensors (packed)
  /// The same in the model's buffers (EnergyModel::parameters / gradient).
  std::vector<std::size_t> buffer_offsets;  ///< [tensor]
  std::vector<std::vector<nn::LayerOffsets>> embedding_buffer_offsets, fitting_buffer_offsets;
  std::size_t buffer_size = 0;  ///< scalars of a buffer (with the gaps)

  /// Builds the layout of a model with `ntypes` types.
  ParameterLayout(DescriptorConfig const& descriptor, FittingConfig const& fitting, int ntypes) {
    embedding_shapes = nn::embedding_shapes(descriptor.neuron, descriptor.resnet_dt);
    int const m1 = descriptor.neuron.back();
    fitting_shapes = nn::fitting_shapes(m1 * descriptor.axis_neuron, fitting.neuron, fitting.resnet_dt);
    int const nnets = descriptor.type_one_side ? ntypes : ntypes * ntypes;
    for (int k = 0; k < nnets; ++k)
      add_net("embedding_net" + std::to_string(k), embedding_shapes, embedding_offsets, embedding_buffer_offsets);
    for (int t = 0; t < ntypes; ++t)
      add_net("fitting_net" + std::to_string(t), fitting_shapes, fitting_offsets, fitting_buffer_offsets);
  }

  /// The tensor called `name`, or nullptr.
  TensorInfo const* find(std::string const& name) const {
    for (auto const& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }

  /// Packed values (`size`, tensor by tensor) placed in a buffer (`buffer_size`, zeros between tensors).
  template <class T>
  std::vector<T> to_buffer(std::vector<T> const& packed) const {
    require(packed.size() == size, "ParameterLayout::to_buffer: expected " + std::to_string(size) +
                                       " packed values, got " + std::to_string(packed.size()));
    std::vector<T> buffer(buffer_size, T(0));
    for (std::size_t i = 0; i < tensors.size(); ++i)
      std::copy_n(packed.begin() + std::ptrdiff_t(tensors[i].offset), tensors[i].size(),
                  buffer.begin() + std::ptrdiff_t(buffer_offsets[i]));
    return buffer;
  }
  /// A buffer's tensors (`buffer_size` values) packed back to back (`size`).
  template <class T>
  std::vector<T> to_packed(std::vector<T> const& buffer) const {
    require(buffer.size() == buffer_size, "ParameterLayout::to_packed: expected " + std::to_string(buffer_size) +
                                              " buffer values, got " + std::to_string(buffer.size()));
    std::vector<T> packed(size);
    for (std::size_t i = 0; i < tensors.size(); ++i)
      std::copy_n(buffer.begin() + std::ptrdiff_t(buffer_offsets[i]), tensors[i].size(),
                  packed.begin() + std::ptrdiff_t(tensors[i].offset));
    return packed;
  }

 private:
  void add_net(std::string const& prefix, std::vector<nn::LayerShape> const& shapes,
               std::vector<std::vector<nn::LayerOffsets>>& packed, std::vector<std::vector<nn::LayerOffsets>>& placed) {
    std::vector<nn::LayerOffsets> p, b;
    for (std::size_t l = 0; l < shapes.size(); ++l) {
      std::string const base = prefix + "_layer" + std::to_string(l) + "_";
      nn::LayerOffsets po, bo;
      add(base + "w", {shapes[l].n_in, shapes[l].n_out}, po.w, bo.w);
      add(base + "b", {shapes[l].n_out}, po.b, bo.b);
      if (shapes[l].timestep) add(base + "idt", {shapes[l].n_out}, po.idt, bo.idt);
      p.push_back(po);
      b.push_back(bo);
    }
    packed.push_back(std::move(p));
    placed.push_back(std::move(b));
  }
  void add(std::string name, std::vector<int> shape, std::size_t& packed_offset, std::size_t& buffer_offset) {
    TensorInfo t{std::move(name), std::move(shape), size};
    packed_offset = size;
    buffer_offset = (buffer_size + buffer_alignment - 1) / buffer_alignment * buffer_alignment;
    size += t.size();
    buffer_size = buffer_offset + t.size();
    buffer_offsets.push_back(buffer_offset);
    tensors.push_back(std::move(t));
  }
};

/// SPEC.md section 5: W ~ N(0, 1/sqrt(n_in + n_out)), b ~ N(0, 1), idt ~ N(0.1, 0.001), from `seed`.
inline std::vector<double> initial_parameters(ParameterLayout const& layout, std::uint64_t seed) {
  std::vector<double> values(layout.size);
  std::mt19937_64 engine(seed);
  for (auto const& t : layout.tensors) {
    std::string const kind = t.name.substr(t.name.rfind('_') + 1);
    double mean = 0, stddev = 1;
    if (kind == "w") stddev = 1.0 / std::sqrt(double(t.shape[0] + t.shape[1]));
    if (kind == "idt") mean = 0.1, stddev = 0.001;
    std::normal_distribution<double> normal(mean, stddev);
    for (std::size_t k = 0; k < t.size(); ++k) values[t.offset + k] = normal(engine);
  }
  return values;
}

}  // namespace dpk

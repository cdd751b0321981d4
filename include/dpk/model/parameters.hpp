#pragma once
/// \file parameters.hpp
/// \brief Named tensors of the se_e2_a + energy model inside one flat parameter buffer, and
/// their seeded initialisation (SPEC.md section 5).

#include <dpk/model/config.hpp>
#include <dpk/model/tensor_info.hpp>
#include <dpk/nn/layer.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace dpk {

/// Layout of all parameters: the tensors in buffer order and, per network, each layer's offsets.
struct ParameterLayout {
  std::vector<TensorInfo> tensors;
  std::vector<nn::LayerShape> embedding_shapes, fitting_shapes;
  std::vector<std::vector<nn::LayerOffsets>> embedding_offsets;  ///< [net][layer], net = t_j or t_i + ntypes t_j
  std::vector<std::vector<nn::LayerOffsets>> fitting_offsets;    ///< [centre type][layer]
  std::size_t size = 0;                                          ///< scalars in the buffer

  /// Builds the layout of a model with `ntypes` types.
  ParameterLayout(DescriptorConfig const& descriptor, FittingConfig const& fitting, int ntypes) {
    embedding_shapes = nn::embedding_shapes(descriptor.neuron, descriptor.resnet_dt);
    int const m1 = descriptor.neuron.back();
    fitting_shapes = nn::fitting_shapes(m1 * descriptor.axis_neuron, fitting.neuron, fitting.resnet_dt);
    int const nnets = descriptor.type_one_side ? ntypes : ntypes * ntypes;
    for (int k = 0; k < nnets; ++k)
      embedding_offsets.push_back(add_net("embedding_net" + std::to_string(k), embedding_shapes));
    for (int t = 0; t < ntypes; ++t)
      fitting_offsets.push_back(add_net("fitting_net" + std::to_string(t), fitting_shapes));
  }

  /// The tensor called `name`, or nullptr.
  TensorInfo const* find(std::string const& name) const {
    for (auto const& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }

 private:
  std::vector<nn::LayerOffsets> add_net(std::string const& prefix, std::vector<nn::LayerShape> const& shapes) {
    std::vector<nn::LayerOffsets> offsets;
    for (std::size_t l = 0; l < shapes.size(); ++l) {
      std::string const base = prefix + "_layer" + std::to_string(l) + "_";
      nn::LayerOffsets o;
      o.w = add(base + "w", {shapes[l].n_in, shapes[l].n_out});
      o.b = add(base + "b", {shapes[l].n_out});
      if (shapes[l].timestep) o.idt = add(base + "idt", {shapes[l].n_out});
      offsets.push_back(o);
    }
    return offsets;
  }
  std::size_t add(std::string name, std::vector<int> shape) {
    TensorInfo t{std::move(name), std::move(shape), size};
    size += t.size();
    tensors.push_back(std::move(t));
    return tensors.back().offset;
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

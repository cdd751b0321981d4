#pragma once
/// \file config.hpp
/// \brief The model's hyperparameters as plain structs (no JSON): the se_e2_a descriptor and the
/// energy fitting net. `io/input.hpp` parses input.json into them, `io/model_file.hpp` stores them.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dpk {

/// model.descriptor (type "se_e2_a", alias "se_a"). Defaults are DeePMD-kit's.
struct DescriptorConfig {
  std::string type = "se_e2_a";
  std::vector<int> sel;                       ///< max neighbours per type (required; empty while sel_auto)
  /// `"sel": "auto"` / `"auto:RATIO"` in input.json: sel comes from the training data's
  /// neighbour counts times this ratio (1.1 for "auto"), resolved by the trainer (auto_sel).
  std::optional<double> sel_auto;
  double rcut = 6.0;                          ///< cutoff radius (A)
  double rcut_smth = 0.5;                     ///< start of the smooth switch (A)
  std::vector<int> neuron = {10, 20, 40};     ///< embedding widths; M1 = neuron.back()
  int axis_neuron = 4;                        ///< M2
  bool type_one_side = false;
  bool resnet_dt = false;
  std::string activation_function = "tanh";  ///< only tanh is implemented
  std::string precision = "default";          ///< "float64" | "float32" | "default"
  std::optional<std::uint64_t> seed;
  int nnei() const { int n = 0; for (int s : sel) n += s; return n; }
};

/// model.fitting_net (type "ener").
struct FittingConfig {
  std::vector<int> neuron = {120, 120, 120};
  bool resnet_dt = true;
  std::string activation_function = "tanh";
  std::string precision = "default";
  std::optional<std::uint64_t> seed;
};

}  // namespace dpk

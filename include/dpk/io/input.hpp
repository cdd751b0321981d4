#pragma once
/// \file input.hpp
/// \brief DeePMD-kit's input.json (se_e2_a descriptor + ener fitting/loss) as plain structs.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dpk {

/// model.descriptor (type "se_e2_a", alias "se_a"). Defaults are DeePMD-kit's.
struct DescriptorConfig {
  std::string type = "se_e2_a";
  std::vector<int> sel;                       ///< max neighbours per type (required)
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

/// learning_rate (type "exp").
struct LearningRateConfig {
  std::string type = "exp";
  double start_lr = 1e-3;
  double stop_lr = 1e-8;
  int decay_steps = 5000;
  std::string scale_by_worker = "linear";    ///< "linear" | "sqrt" | "none" (training.*)
};

/// loss (type "ener"): prefactor schedules p = limit + (start - limit) lr/start_lr.
struct LossConfig {
  std::string type = "ener";
  double start_pref_e = 0.02, limit_pref_e = 1.0;
  double start_pref_f = 1000.0, limit_pref_f = 1.0;
  double start_pref_v = 0.0, limit_pref_v = 0.0;
};

/// A batch size: a fixed number of frames, or "auto"/"auto:N" = ceil(N / natoms) frames.
struct BatchSize {
  bool automatic = true;
  int value = 32;  ///< frames when !automatic, N when automatic
  /// Frames per batch for a system of `natoms` atoms.
  int frames_for(int natoms) const { return automatic ? (value + natoms - 1) / natoms : value; }
};

/// training.training_data / training.validation_data.
struct DataConfig {
  std::vector<std::string> systems;  ///< resolved against the input file's folder
  BatchSize batch_size;
  int numb_btch = 1;                 ///< validation batches per evaluation
};

/// training.
struct TrainingConfig {
  DataConfig training_data;
  std::optional<DataConfig> validation_data;
  long numb_steps = 1000000;
  std::optional<std::uint64_t> seed;
  std::string disp_file = "lcurve.out";
  long disp_freq = 1000;
  long save_freq = 1000;
  std::string save_ckpt = "model.ckpt";
};

/// The whole input file.
struct InputConfig {
  std::string source;                    ///< the file it came from (for messages)
  std::vector<std::string> type_map;     ///< model.type_map (may be empty)
  DescriptorConfig descriptor;
  FittingConfig fitting;
  LearningRateConfig learning_rate;
  LossConfig loss;
  TrainingConfig training;
  std::vector<std::string> warnings;     ///< keys DeePMD-kit accepts that dpk ignores, by path
  /// "float64" or "float32": the descriptor's precision ("default" = float64).
  std::string precision() const {
    return descriptor.precision == "float32" ? "float32" : "float64";
  }
};

/// Reads and validates `path`. Throws dpk::Error naming the key path on wrong types or
/// impossible values; unknown-but-DeePMD-valid keys are collected in `warnings`.
InputConfig read_input(std::string const& path);

}  // namespace dpk

#pragma once
/// \file prediction.hpp
/// \brief What the model predicts for a batch (energies, forces, virials) and the cotangent of a
/// scalar function of it (a loss), which is what the model's gradient pass takes.

#include <dpk/core/types.hpp>

namespace dpk {

/// What the model predicts for a batch.
template <class Scalar, class MemorySpace>
struct Prediction {
  View1<Scalar, MemorySpace> energy{"dpk::Prediction::energy", 0};                ///< (nframes)
  View1<Scalar, MemorySpace> atom_energy{"dpk::Prediction::atom_energy", 0};      ///< (nloc)
  View2<Scalar, MemorySpace> force{"dpk::Prediction::force", 0, 3};               ///< (nloc, 3)
  View2<Scalar, MemorySpace> virial{"dpk::Prediction::virial", 0, 9};             ///< (nframes, 9)
  View2<Scalar, MemorySpace> atom_virial{"dpk::Prediction::atom_virial", 0, 9};  ///< (nloc, 9)
};

/// dL/dE, dL/dF, dL/dW of a scalar L of a Prediction (atomic energies and atom virials not
/// included): the input of EnergyModel::backward.
template <class Scalar, class MemorySpace>
struct PredictionCotangent {
  View1<Scalar, MemorySpace> energy{"dpk::PredictionCotangent::energy", 0};     ///< (nframes)
  View2<Scalar, MemorySpace> force{"dpk::PredictionCotangent::force", 0, 3};    ///< (nloc, 3)
  View2<Scalar, MemorySpace> virial{"dpk::PredictionCotangent::virial", 0, 9};  ///< (nframes, 9)
};

}  // namespace dpk

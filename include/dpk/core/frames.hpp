#pragma once
/// \file frames.hpp
/// \brief A batch of frames on the device: the input of the neighbour search.

#include <dpk/core/types.hpp>

namespace dpk {

/// `nframes` frames of `natoms` atoms each (one system: same types in every frame).
/// Atom a of the batch is atom a % natoms of frame a / natoms.
template <class Scalar, class MemorySpace>
struct Frames {
  static_assert(Kokkos::is_memory_space<MemorySpace>::value, "MemorySpace must be a Kokkos memory space");
  int nframes = 0;
  int natoms = 0;
  bool periodic = true;
  /// Atoms [0, centres) of each frame are centres; the others are only neighbours and get an
  /// empty neighbour list (an MD domain's ghost atoms). -1: every atom is a centre.
  int centres = -1;
  View2<Scalar, MemorySpace> coord{"dpk::Frames::coord", 0, 3};  ///< (nframes*natoms, 3), A
  View2<Scalar, MemorySpace> box{"dpk::Frames::box", 0, 9};      ///< (nframes, 9), rows = cell vectors
  View1<int, MemorySpace> types{"dpk::Frames::types", 0};        ///< (nframes*natoms), 0-based
  /// Optional, one frame with centres only: the centre that each atom images (a centre itself,
  /// a ghost the local atom it is a periodic image of), or -1 (an atom of another domain). Lets
  /// a pair of centres share one embedding row across a periodic boundary; empty: atom a is a.
  View1<int, MemorySpace> image_of{"dpk::Frames::image_of", 0};
  /// Atoms in the batch.
  int nloc() const { return nframes * natoms; }
};

}  // namespace dpk

namespace dpk {

/// Reference labels of a batch (DFT energies, forces, optional virials), on the device.
template <class Scalar, class MemorySpace>
struct Labels {
  bool has_virial = false;
  View1<Scalar, MemorySpace> energy{"dpk::Labels::energy", 0};     ///< (nframes), eV
  View2<Scalar, MemorySpace> force{"dpk::Labels::force", 0, 3};    ///< (nloc, 3), eV/A
  View2<Scalar, MemorySpace> virial{"dpk::Labels::virial", 0, 9};  ///< (nframes, 9), eV
};

}  // namespace dpk
